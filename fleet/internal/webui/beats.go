package webui

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// heartbeat is a worker's heartbeat as the pages show it, with when this gateway received it.
type heartbeat struct {
	protocol.Heartbeat
	received time.Time
}

// Age is how long ago the heartbeat was received.
func (h heartbeat) Age() string { return time.Since(h.received).Round(100 * time.Millisecond).String() }

// Anyone allowed to publish on the heartbeat subject can send one, so what it adds is bounded:
// a worker is listed by when its heartbeat arrived (its own clock decides nothing), one that
// claims to come from the future is ignored (protocol.Heartbeat.Plausible), and the list holds at
// most protocol.MaxWorkersListed rows.
const workerGone = time.Minute // how long a silent worker stays listed

// beats keeps the last heartbeat of each worker from one subscription.
type beats struct {
	mu   sync.Mutex
	seen map[string]heartbeat
	subs []*nats.Subscription
}

func (b *beats) record(m *nats.Msg) {
	var hb heartbeat
	now := time.Now()
	if json.Unmarshal(m.Data, &hb.Heartbeat) != nil || !hb.Plausible(now) {
		return
	}
	hb.received = now
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.seen[hb.ID]; !ok && len(b.seen) >= protocol.MaxWorkersListed {
		b.expire(now)
		if len(b.seen) >= protocol.MaxWorkersListed {
			return // full of live rows: a new id waits for one to go
		}
	}
	b.seen[hb.ID] = hb
}

// expire drops the workers silent for workerGone; the caller holds mu.
func (b *beats) expire(now time.Time) {
	for id, hb := range b.seen {
		if now.Sub(hb.received) > workerGone {
			delete(b.seen, id)
		}
	}
}

// start subscribes to the heartbeats and pings the workers once, so that the first overview
// need not wait for a period.
func (b *beats) start(nc *nats.Conn, s job.Subjects) error {
	b.seen = map[string]heartbeat{}
	inbox := nats.NewInbox()
	for _, subject := range []string{s.Workers(), inbox} {
		sub, err := nc.Subscribe(subject, b.record)
		if err != nil {
			b.stop()
			return err
		}
		b.subs = append(b.subs, sub)
	}
	return nc.PublishRequest(s.WorkersPing(), inbox, nil)
}

func (b *beats) stop() {
	for _, s := range b.subs {
		_ = s.Unsubscribe()
	}
}

// list returns the workers heard from within workerGone, by id.
func (b *beats) list() []heartbeat {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expire(time.Now())
	out := make([]heartbeat, 0, len(b.seen))
	for _, hb := range b.seen {
		out = append(out, hb)
	}
	slices.SortFunc(out, func(a, b heartbeat) int { return strings.Compare(a.ID, b.ID) })
	return out
}
