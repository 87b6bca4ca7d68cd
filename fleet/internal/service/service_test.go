package service_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/runfleet/runfleet/fleet/internal/service"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// journal notes the starts and stops of named services.
type journal struct {
	mu     sync.Mutex
	events []string
}

func (j *journal) note(e string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.events = append(j.events, e)
}

func (j *journal) String() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return strings.Join(j.events, " ")
}

// noted is a service that notes its start and stop, and fails to start when told to.
type noted struct {
	name string
	j    *journal
	fail error
}

func (n noted) Start(context.Context) error {
	if n.fail != nil {
		return n.fail
	}
	n.j.note("+" + n.name)
	return nil
}

func (n noted) Stop() { n.j.note("-" + n.name) }

func TestGroupStopsInReverse(t *testing.T) {
	refused := errors.New("refused")
	cases := []struct {
		name    string
		fail    string // the service whose Start fails
		wantErr error
		want    string
	}{
		{name: "all start", want: "+a +b +c -c -b -a"},
		{name: "one fails", fail: "c", wantErr: refused, want: "+a +b -b -a"},
		{name: "the first fails", fail: "a", wantErr: refused, want: ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := &journal{}
			var services []service.Service
			for _, name := range []string{"a", "b", "c"} {
				s := noted{name: name, j: j}
				if name == c.fail {
					s.fail = refused
				}
				services = append(services, s)
			}
			var g service.Group
			// Two calls, as the worker makes them: what the second starts stops first.
			err := g.Start(t.Context(), services[0])
			if err == nil {
				err = g.Start(t.Context(), services[1:]...)
			}
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("Start() error = %v, want %v", err, c.wantErr)
			}
			g.Stop()
			g.Stop() // stops nothing more
			if got := j.String(); got != c.want {
				t.Errorf("events = %q, want %q", got, c.want)
			}
		})
	}
}

// TestLoopStopWaits: Stop returns once the loop's function has returned, which saw its ctx end;
// a second Stop, or one without a Start, returns at once.
func TestLoopStopWaits(t *testing.T) {
	service.NewLoop("never started", slog.Default(), nil).Stop()
	j := &journal{}
	started := make(chan struct{})
	l := service.NewLoop("loop", slog.Default(), func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		j.note("returned")
		return nil
	})
	if err := l.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	<-started
	l.Stop()
	j.note("stopped")
	l.Stop()
	if got, want := j.String(), "returned stopped"; got != want {
		t.Errorf("events = %q, want %q", got, want)
	}
}

// TestLoopEndsWithItsContext: a loop runs until Start's ctx ends too, and its error is logged
// under its name.
func TestLoopEndsWithItsContext(t *testing.T) {
	var out strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return out.Write(p)
	}), nil))
	ctx, cancel := context.WithCancel(t.Context())
	ended := make(chan struct{})
	l := service.NewLoop("watch", log, func(ctx context.Context) error {
		defer close(ended)
		<-ctx.Done()
		return errors.New("gone")
	})
	if err := l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-ended
	l.Stop()
	mu.Lock()
	defer mu.Unlock()
	if got := out.String(); !strings.Contains(got, "msg=watch err=gone") {
		t.Errorf("log = %q, want the loop's error under its name", got)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
