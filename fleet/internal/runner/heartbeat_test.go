package runner

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/keyspace"
	"github.com/runfleet/runfleet/fleet/internal/lease"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
)

// TestHeartbeatOwnsItsLogger: the attempt's goroutine rewrites its logger (take names the
// sandbox in it) while the heartbeat runs and logs; run with -race, the two share no logger.
// Nothing here orders the two goroutines, so the race detector sees any shared access.
func TestHeartbeatOwnsItsLogger(t *testing.T) {
	srv := testenv.StartRedis(t)
	leases := lease.NewStore(srv.Client(), lease.Options{TTL: time.Second})
	if err := leases.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	c, err := leases.Claim(t.Context(), "default", "j", "w1", lease.Delivery{Count: 1, QueuedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	// Another generation takes the job: the heartbeat's first extend is refused, and it logs.
	if err := srv.Client().Set(t.Context(), keyspace.New("runfleet").Lease("default", "j"), "99:w2", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	r := &Runner{leases: leases, o: Options{Observer: nopObserver{}}}
	logs := [2]*slog.Logger{slog.New(slog.NewTextHandler(io.Discard, nil)), slog.New(slog.NewTextHandler(io.Discard, nil))}
	a := &attempt{q: "default", id: "j", lease: c.Lease, log: logs[0]}
	leaseCtx, lose := context.WithCancelCause(context.Background())
	defer lose(nil)
	var hb sync.WaitGroup
	log := a.log
	hb.Go(func() { r.heartbeat(leaseCtx, a, log, lose) })
	ended := make(chan struct{})
	go func() {
		hb.Wait()
		close(ended)
	}()
	for i := 0; ; i++ {
		select {
		case <-ended:
			if !errors.Is(context.Cause(leaseCtx), errLeaseLost) {
				t.Errorf("lease context's cause = %v, want errLeaseLost", context.Cause(leaseCtx))
			}
			return
		default:
		}
		a.log = logs[i%2]
		runtime.Gosched()
	}
}
