package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/fleet/internal/metrics"
	"github.com/runfleet/runfleet/job"
)

// listener serves /metrics, /healthz and /readyz: a service that listens when it starts, and
// lets the requests in flight end (for up to five seconds) when it stops.
type listener struct {
	addr string
	srv  *http.Server
	log  *slog.Logger
	ln   net.Listener
	done chan struct{}
}

func newListener(addr string, h http.Handler, log *slog.Logger) *listener {
	return &listener{addr: addr, srv: &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}, log: log}
}

func (l *listener) Start(context.Context) error {
	ln, err := net.Listen("tcp", l.addr)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", l.addr, err)
	}
	l.ln, l.done = ln, make(chan struct{})
	go func() {
		defer close(l.done)
		if err := l.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			l.log.Error("http", "err", err)
		}
	}()
	return nil
}

func (l *listener) Stop() {
	if l.done == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = l.srv.Shutdown(ctx)
	<-l.done
}

// Addr is the address listened on, once started.
func (l *listener) Addr() string { return l.ln.Addr().String() }

// measureJobsStream keeps the metrics of the jobs stream's fullness current until ctx ends. One
// stream info every 15 s per worker: those requests share the server's API queue.
func measureJobsStream(ctx context.Context, js jetstream.JetStream, s job.Subjects, m *metrics.Metrics, log *slog.Logger) {
	t := time.NewTicker(15 * time.Second)
	defer t.Stop()
	for {
		st, err := js.Stream(ctx, s.JobsStream())
		if err == nil {
			info := st.CachedInfo()
			m.JobsStream(info.State.Bytes, info.State.Msgs, info.Config.MaxBytes)
		} else if ctx.Err() == nil {
			log.Warn("jobs stream info", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// reapEvery calls reap every period until ctx ends.
func reapEvery(ctx context.Context, period time.Duration, reap func(context.Context)) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			reap(ctx)
		}
	}
}
