package providertest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/job"
)

// runPoolPast checks that a sandbox taken from the pool sees nothing of the pool's past: another
// pooled sandbox, waiting beside it, ran a job that left files, env and a process, and is still
// there when it runs. It also checks that a sandbox runs one payload only.
func runPoolPast(ctx context.Context, t *testing.T, e Env) {
	py := e.Profiles["python3"]
	a := take(ctx, t, e, py)
	defer a.Destroy(context.WithoutCancel(ctx))
	b := take(ctx, t, e, py)
	defer b.Destroy(context.WithoutCancel(ctx))
	if a.ID() == b.ID() {
		t.Fatalf("two takes returned one sandbox %s", a.ID())
	}
	assign(ctx, t, a, nil)
	first := run(ctx, t, a, job.Request{Code: "import os, subprocess\nopen('/workspace/left', 'w').write('x')\n" +
		"open('/tmp/left', 'w').write('x')\nos.environ['LEFT'] = '1'\n" +
		"subprocess.Popen(['/usr/bin/python3', '-c', 'import time; time.sleep(60)', 'left-behind'], start_new_session=True)\nprint('left')",
		Env: map[string]string{"JOB_ONE": "1"}})
	if first != "left\n" {
		t.Fatalf("first job stdout = %q, want %q", first, "left\n")
	}
	assign(ctx, t, b, nil)
	// Beside the base environment, only Docker's own HOSTNAME may show.
	second := run(ctx, t, b, job.Request{Code: "import os\nleft = 0\nfor p in os.listdir('/proc'):\n" +
		"    try:\n        left += p.isdigit() and b'left-behind' in open('/proc/%s/cmdline' % p, 'rb').read()\n    except OSError:\n        pass\n" +
		"print(os.listdir('/workspace'), os.listdir('/tmp'), sorted(k for k in os.environ if k not in ('HOME', 'LANG', 'PATH', 'TMPDIR', 'PWD', 'LC_CTYPE', 'HOSTNAME')), left)"})
	if want := "[] [] [] 0\n"; second != want {
		t.Errorf("second job sees %q, want %q", second, want)
	}

	// Used once: a second Assign or Run is refused, and a sandbox never assigned does not run.
	if err := a.Assign(ctx, Job("again")); !errors.Is(err, sandbox.ErrUsed) {
		t.Errorf("second Assign() error = %v, want ErrUsed", err)
	}
	if _, err := a.Run(ctx, strings.NewReader(""), &bytes.Buffer{}, &bytes.Buffer{}); !errors.Is(err, sandbox.ErrUsed) {
		t.Errorf("second Run() error = %v, want ErrUsed", err)
	}
	c := take(ctx, t, e, py)
	defer c.Destroy(context.WithoutCancel(ctx))
	if _, err := c.Run(ctx, strings.NewReader(""), &bytes.Buffer{}, &bytes.Buffer{}); !errors.Is(err, sandbox.ErrUsed) {
		t.Errorf("Run() without Assign error = %v, want ErrUsed", err)
	}
}

// run sends req into an assigned sandbox and returns its stdout.
func run(ctx context.Context, t *testing.T, sb sandbox.Sandbox, req job.Request) string {
	t.Helper()
	payload, err := profile.Payload(req)
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	exit, err := sb.Run(ctx, bytes.NewReader(payload), &out, &errb)
	if err != nil || exit.Code != 0 {
		t.Fatalf("Run() = %+v, %v; stderr %q", exit, err, clip(errb.String()))
	}
	return out.String()
}

// runDistinctUIDs checks that two sandboxes alive at once, their programs running together, run
// under different uids: the kernel's per-uid limits (inotify instances, pipe buffer pages,
// RLIMIT_NPROC, RLIMIT_MSGQUEUE) are then each job's own, and one job cannot use up another's.
func runDistinctUIDs(ctx context.Context, t *testing.T, e Env) {
	py := e.Profiles["python3"]
	sbs := []sandbox.Sandbox{take(ctx, t, e, py), take(ctx, t, e, py)}
	uids := make([]string, len(sbs))
	var wg sync.WaitGroup
	for i, sb := range sbs {
		defer sb.Destroy(context.WithoutCancel(ctx))
		assign(ctx, t, sb, nil)
		wg.Go(func() {
			payload, _ := profile.Payload(job.Request{Code: "import os, time\nprint(os.getuid(), os.getgid())\ntime.sleep(0.5)"})
			var out bytes.Buffer
			if _, err := sb.Run(ctx, bytes.NewReader(payload), &out, io.Discard); err != nil {
				uids[i] = "error: " + err.Error()
				return
			}
			uids[i] = strings.TrimSpace(out.String())
		})
	}
	wg.Wait()
	if uids[0] == "" || uids[0] == uids[1] || strings.HasPrefix(uids[0], "error") || strings.HasPrefix(uids[1], "error") {
		t.Errorf("two sandboxes running at once report uid gid %q and %q, want two uids", uids[0], uids[1])
	}
}
