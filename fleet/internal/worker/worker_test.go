package worker_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runfleet/runfleet/fleet/internal/cli"
	"github.com/runfleet/runfleet/fleet/internal/providers/namespace"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/fleet/internal/worker"
	"github.com/runfleet/runfleet/job"
)

func TestMain(m *testing.M) {
	namespace.Init()
	goleak.VerifyTestMain(m)
}

// TestRunStopsAtOnceWhenIdle: an idle worker's Run returns within a second of its ctx ending,
// however long its grace, with every service it started stopped (goleak checks what is left).
func TestRunStopsAtOnceWhenIdle(t *testing.T) {
	testenv.NeedRoot(t)
	n, r := testenv.StartNATS(t), testenv.StartRedis(t)
	logs := &testenv.Buffer{}
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	done := make(chan error, 1)
	go func() {
		done <- worker.Run(ctx, t.Context(), worker.Config{ID: "idle", Prefix: "wtest", NATS: cli.NATS{URL: n.URL}, RedisURL: r.URL,
			RootFS: testenv.RootFS(t), Concurrency: 1, Listen: "127.0.0.1:0", Grace: time.Minute,
		}, slog.New(slog.NewJSONHandler(logs, nil)))
	}()
	testenv.WaitFor(t, time.Minute, "the worker started", func() bool { return strings.Contains(logs.String(), `"worker started"`) })
	stop()
	stopped := time.Now()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run() error = %v, want nil", err)
		}
		t.Logf("Run returned %v after its ctx ended", time.Since(stopped))
	case <-time.After(time.Second):
		t.Errorf("Run still running 1s after its ctx ended (grace 1m, no job)")
		<-done
	}
	if !strings.Contains(logs.String(), `"worker stopped"`) {
		t.Errorf("log lacks \"worker stopped\":\n%s", logs.String())
	}
}

// TestPolicyFollowsMaxTimeout: the page cap holds a job of the longest timeout accepted, unless
// MaxPages sets it.
func TestPolicyFollowsMaxTimeout(t *testing.T) {
	d := job.DefaultPolicy()
	cases := []struct {
		name string
		c    worker.Config
		want job.Limits
	}{
		{name: "zero", want: job.Limits{Timeout: 5 * time.Minute, MaxPages: max(d.Max.MaxPages, job.PagesNeeded(5*time.Minute, d.Max.OutputBytes, d.Default.PageBytes))}},
		{name: "max timeout", c: worker.Config{MaxTimeout: time.Hour}, want: job.Limits{Timeout: time.Hour, MaxPages: job.PagesNeeded(time.Hour, d.Max.OutputBytes, d.Default.PageBytes)}},
		{name: "max pages", c: worker.Config{MaxTimeout: time.Hour, MaxPages: 9000}, want: job.Limits{Timeout: time.Hour, MaxPages: 9000}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := c.c.Policy()
			if p.Max.Timeout != c.want.Timeout || p.Max.MaxPages != c.want.MaxPages {
				t.Errorf("Policy().Max = timeout %v, max_pages %d; want %v, %d", p.Max.Timeout, p.Max.MaxPages, c.want.Timeout, c.want.MaxPages)
			}
		})
	}
}
