package worker

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/providers/docker"
	"github.com/runfleet/runfleet/fleet/internal/providers/gvisor"
	"github.com/runfleet/runfleet/fleet/internal/providers/namespace"
	"github.com/runfleet/runfleet/fleet/internal/pydist"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/fleet/internal/supervise"
)

// sandboxes is the provider a worker opened, with what goes with it.
type sandboxes struct {
	provider sandbox.Provider
	close    func() error
	profiles profile.Set
	// reap removes what sandboxes whose destroy failed left behind; the reaper calls it every
	// minute.
	reap func(context.Context)
	// removalsPending, when set, counts the removals a provider has yet to make (a metric).
	removalsPending func() int
}

// openSandboxes opens c's provider and reads its profiles; the caller closes the provider.
func openSandboxes(ctx context.Context, c Config, log *slog.Logger) (*sandboxes, error) {
	dlog := sandbox.DispatchLog{Path: c.DispatchLog}
	var sb *sandboxes
	switch c.Provider {
	case "namespace":
		o := namespace.Options{CgroupName: c.Prefix, DispatchLog: dlog, NoZygote: c.NoZygote, Logger: log}
		if len(c.Supervisor) > 0 {
			var err error
			if o.Supervisor, err = supervise.PrivateCopy(bytes.NewReader(c.Supervisor), supervise.DefaultDir); err != nil {
				return nil, fmt.Errorf("--provider namespace: supervisor: %w", err)
			}
		}
		p, err := namespace.New(o)
		if err != nil {
			return nil, fmt.Errorf("--provider namespace: %w", err)
		}
		if p.Reaped > 0 {
			log.Warn("removed cgroups left by dead workers", "count", p.Reaped)
		}
		shipped, err := profile.ReadShipped(c.RootFS)
		var profiles profile.Set
		if err == nil {
			profiles, err = langs(c, pythonPackages(profile.Builtin(c.RootFS, ""), c.RootFS, log), shipped, c.RootFS, "", log)
		}
		if err != nil {
			_ = p.Close()
			return nil, err
		}
		sb = &sandboxes{provider: p, close: p.Close, profiles: profiles, reap: func(ctx context.Context) {
			// Sandboxes whose Destroy failed: their cgroups, mount points and uids.
			if _, err := p.Reap(ctx); err != nil {
				log.Warn("reap sandboxes", "err", err)
			}
		}}
	case "docker", "gvisor":
		// No container outlives its longest wait in the pool and the largest timeout: each carries
		// that deadline, which every worker's reaper honours.
		o := docker.Options{Fleet: c.Prefix, Worker: c.ID, DispatchLog: dlog, Logger: log,
			Lifetime: c.WarmMaxAge + c.MaxTimeout + time.Minute}
		if len(c.Supervisor) > 0 {
			var err error
			if o.InitBinary, err = supervise.PrivateCopy(bytes.NewReader(c.Supervisor), supervise.DefaultDir); err != nil {
				return nil, fmt.Errorf("--provider %s: container init: %w", c.Provider, err)
			}
		}
		// gVisor is the Docker provider with gVisor's runsc as the containers' runtime.
		var p *docker.Provider
		var provider sandbox.Provider
		if c.Provider == "gvisor" {
			g, err := gvisor.New(ctx, o)
			if err != nil {
				return nil, fmt.Errorf("--provider gvisor: %w", err)
			}
			p, provider = g.Provider, g
		} else {
			var err error
			if p, err = docker.New(ctx, o); err != nil {
				return nil, fmt.Errorf("--provider docker: %w", err)
			}
			provider = p
		}
		shipped, err := p.Manifests(ctx, c.Image, profile.ShippedDir)
		var profiles profile.Set
		if err == nil {
			profiles, err = langs(c, profile.Builtin("", c.Image), shipped, "", c.Image, log)
		}
		if err == nil {
			profiles, err = p.Resolve(ctx, profiles)
		}
		if err != nil {
			_ = p.Close()
			return nil, fmt.Errorf("--provider %s: %w", c.Provider, err)
		}
		profiles = profile.SealDigest(profiles)
		sb = &sandboxes{provider: provider, close: p.Close, profiles: profiles, removalsPending: p.PendingRemovals, reap: func(ctx context.Context) {
			if _, err := p.Reap(ctx); err != nil {
				log.Warn("reap containers", "err", err)
			}
		}}
		sb.reap(ctx)
	default:
		return nil, fmt.Errorf("--provider %q: want docker, gvisor or namespace", c.Provider)
	}
	if c.Profiles != "" {
		profiles, err := profile.Load(c.Profiles, sb.profiles)
		if err != nil {
			_ = sb.close()
			return nil, err
		}
		sb.profiles = profiles
	}
	return sb, nil
}

// langs adds to base the manifests the root or image ships (a `make langs` one carries them in
// profile.ShippedDir), then those of c.Langs, which replace a shipped one of the same name. A
// manifest whose toolchain the root lacks is left out with a warning (an image's, by the
// provider's Resolve).
func langs(c Config, base profile.Set, shipped map[string][]byte, root, image string, log *slog.Logger) (profile.Set, error) {
	s, skipped, err := profile.AddShipped(base, shipped, root, image)
	if err != nil {
		return nil, fmt.Errorf("languages the root fs or image ships (%s): %w", profile.ShippedDir, err)
	}
	if len(shipped) > 0 {
		log.Info("languages shipped with the root fs or image", "count", len(shipped), "rootfs", root, "image", image)
	}
	if c.Langs != "" {
		var more []string
		if s, more, err = profile.LoadDir(c.Langs, s, root, image); err != nil {
			return nil, fmt.Errorf("--langs: %w", err)
		}
		skipped = append(skipped, more...)
	}
	if len(skipped) > 0 {
		log.Warn("languages not offered: the root file system lacks a file they require", "langs", skipped, "rootfs", root)
	}
	return s, nil
}

// pythonPackages fills the packages of the python3 profiles on a root fs (the host's, for ""):
// what the worker announces, and what the gateway's dependency route lists. A python3 without
// jinja2 is said at start: Dify's Template Transform node imports it.
func pythonPackages(s profile.Set, root string, log *slog.Logger) profile.Set {
	pkgs, err := pydist.Read(cmp.Or(root, "/"))
	if err != nil {
		log.Warn("python packages of the root fs", "rootfs", root, "err", err)
		return s
	}
	names := make([]string, len(pkgs))
	jinja2 := false
	for i, p := range pkgs {
		names[i] = p.String()
		jinja2 = jinja2 || strings.EqualFold(p.Name, "jinja2")
	}
	for _, n := range []string{"python3", profile.DataProfile} {
		if p, ok := s[n]; ok && p.Packages == nil {
			p.Packages = names
			s[n] = p
		}
	}
	if !jinja2 {
		log.Warn("python3 lacks jinja2: Dify's Template Transform node fails with \"No module named 'jinja2'\" (give --rootfs the sandbox root fs: make image)", "rootfs", root)
	}
	return s
}
