package providertest

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// RunMachineryOutOfStderr checks that nothing of a sandbox's own machinery reaches the job's
// stderr. While the program runs, quit makes the sandbox's init (or supervisor) write what it
// would write on a crash: the provider's means to send it SIGQUIT, on which the Go runtime dumps
// every goroutine to its stderr and exits. The sandbox ends; its stderr must hold none of it, and
// Run must say the program's outcome was lost rather than report the init's exit as the program's.
func RunMachineryOutOfStderr(t *testing.T, e Env, quit func(t *testing.T, sb sandbox.Sandbox)) {
	ctx := t.Context()
	sb := Create(ctx, t, e, e.Profiles["python3"], nil)
	defer sb.Destroy(context.WithoutCancel(ctx))
	payload, err := profile.Payload(job.Request{Code: "import time\nprint('up', flush=True)\ntime.sleep(60)"})
	if err != nil {
		t.Fatal(err)
	}
	var out, errb testenv.Buffer
	done := make(chan error, 1)
	go func() {
		_, err := sb.Run(ctx, bytes.NewReader(payload), &out, &errb)
		done <- err
	}()
	testenv.WaitFor(t, 30*time.Second, "the program's first output", func() bool { return strings.Contains(out.String(), "up") })
	quit(t, sb)
	select {
	case err := <-done:
		// The program's outcome is lost with its init: the runner settles such a job unknown.
		if err == nil {
			t.Error("Run() error = nil after the sandbox's init crashed, want an error")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run() did not return after the init was told to quit")
	}
	if got := errb.String(); got != "" {
		t.Errorf("job stderr = %q, want nothing of the sandbox's machinery", clip(got))
	}
}
