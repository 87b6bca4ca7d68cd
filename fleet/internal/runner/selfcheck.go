package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/job"
)

// SelfCheck runs an empty program in a sandbox of every profile, or the profile's test program
// when it has one (a manifest's), so that a worker whose provider or profiles cannot work on
// this host refuses to start instead of failing every job. A few profiles are checked at once:
// a compile takes seconds, a container's creation most of one.
func SelfCheck(ctx context.Context, p sandbox.Provider, profiles profile.Set) error {
	names := profiles.Names()
	errs := make([]error, len(names))
	slots := make(chan struct{}, selfChecksAtOnce)
	var wg sync.WaitGroup
	for i, name := range names {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			if err := checkProfile(ctx, p, profiles[name]); err != nil {
				errs[i] = fmt.Errorf("profile %s on %s: %w", name, p.Name(), err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// selfChecksAtOnce bounds the sandboxes SelfCheck runs at once.
const selfChecksAtOnce = 3

func checkProfile(ctx context.Context, p sandbox.Provider, prof sandbox.Profile) error {
	limits := sandbox.Limits{Timeout: 20*time.Second + prof.CompileTimeout, MemoryBytes: 256 << 20, Pids: 32, CPUs: 1}
	req := job.Request{Code: " "}
	if prof.Test != nil {
		// A compiler or a JVM needs more than an empty program: the default job limits.
		limits.Pids = job.DefaultPolicy().Default.Pids
		req = job.Request{Code: prof.Test.Code, Stdin: prof.Test.Stdin}
	}
	sb, err := p.Create(ctx, sandbox.Shape{Profile: prof, Limits: limits})
	if err != nil {
		return err
	}
	// A waiting sandbox's limits change when it is assigned: a host that refuses fails here.
	if prof.Test == nil {
		limits.MemoryBytes, limits.Pids = 128<<20, 16
	} else {
		limits.Pids--
	}
	if err := sb.Assign(ctx, sandbox.Job{ID: "selfcheck", Worker: "selfcheck", Limits: limits}); err != nil {
		return errors.Join(err, sb.Destroy(context.WithoutCancel(ctx)))
	}
	payload, _ := profile.Payload(req)
	var out, errb bytes.Buffer
	var stdout io.Writer = &out
	compiled := &compileStatus{w: &out}
	if prof.CompileTimeout > 0 {
		stdout = compiled
	}
	exit, err := sb.Run(ctx, bytes.NewReader(payload), stdout, &errb)
	derr := sb.Destroy(context.WithoutCancel(ctx))
	switch {
	case err != nil:
		return err
	case compiled.failed():
		return fmt.Errorf("test program did not compile: %s", bytes.TrimSpace(errb.Bytes()))
	case exit.Code != 0 || exit.Signal != "" || exit.TimedOut:
		return fmt.Errorf("program ended with exit %d, signal %q, timed out %v: %s", exit.Code, exit.Signal, exit.TimedOut, bytes.TrimSpace(errb.Bytes()))
	case prof.Test != nil && out.String() != prof.Test.Stdout:
		return fmt.Errorf("test program printed %q, want %q", out.String(), prof.Test.Stdout)
	case derr != nil:
		return derr
	}
	return nil
}
