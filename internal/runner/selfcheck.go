package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/runfleet/runfleet/internal/profile"
	"github.com/runfleet/runfleet/internal/sandbox"
	"github.com/runfleet/runfleet/job"
)

// SelfCheck runs an empty program in a sandbox of every profile, so that a worker whose provider
// or profiles cannot work on this host refuses to start instead of failing every job.
func SelfCheck(ctx context.Context, p sandbox.Provider, profiles profile.Set) error {
	for _, name := range profiles.Names() {
		prof := profiles[name]
		limits := sandbox.Limits{Timeout: 20 * time.Second, MemoryBytes: 256 << 20, Pids: 32, CPUs: 1}
		sb, err := p.Create(ctx, sandbox.Shape{Profile: prof, Limits: limits})
		if err != nil {
			return fmt.Errorf("profile %s on %s: %w", name, p.Name(), err)
		}
		// A waiting sandbox's limits change when it is assigned: a host that refuses fails here.
		limits.MemoryBytes, limits.Pids = 128<<20, 16
		if err := sb.Assign(ctx, sandbox.Job{ID: "selfcheck", Worker: "selfcheck", Limits: limits}); err != nil {
			return fmt.Errorf("profile %s on %s: %w", name, p.Name(), errors.Join(err, sb.Destroy(context.WithoutCancel(ctx))))
		}
		payload, _ := profile.Payload(job.Request{Code: " "})
		var out, errb bytes.Buffer
		exit, err := sb.Run(ctx, bytes.NewReader(payload), &out, &errb)
		derr := sb.Destroy(context.WithoutCancel(ctx))
		switch {
		case err != nil:
			return fmt.Errorf("profile %s on %s: %w", name, p.Name(), err)
		case exit.Code != 0:
			return fmt.Errorf("profile %s on %s: empty program exited %d: %s", name, p.Name(), exit.Code, bytes.TrimSpace(errb.Bytes()))
		case derr != nil:
			return fmt.Errorf("profile %s on %s: %w", name, p.Name(), derr)
		}
	}
	return nil
}
