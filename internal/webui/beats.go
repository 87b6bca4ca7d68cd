package webui

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// heartbeat is what a worker publishes on the workers subject (cmd/worker).
type heartbeat struct {
	ID       string    `json:"id"`
	Version  string    `json:"version"`
	Arch     string    `json:"arch"`
	Provider string    `json:"provider"`
	Queues   string    `json:"queues"`
	Slots    int       `json:"slots"`
	Running  int       `json:"running"`
	Waiting  int       `json:"waiting"`
	At       time.Time `json:"at"`
}

// Age is how long ago the heartbeat was sent.
func (h heartbeat) Age() string { return time.Since(h.At).Round(100 * time.Millisecond).String() }

// workerGone is how long a silent worker stays listed.
const workerGone = time.Minute

// beats keeps the last heartbeat of each worker from one subscription.
type beats struct {
	mu   sync.Mutex
	seen map[string]heartbeat
	subs []*nats.Subscription
}

func (b *beats) record(m *nats.Msg) {
	var hb heartbeat
	if json.Unmarshal(m.Data, &hb) != nil || hb.ID == "" {
		return
	}
	b.mu.Lock()
	b.seen[hb.ID] = hb
	b.mu.Unlock()
}

// start subscribes to the heartbeats and pings the workers once, so that the first overview
// need not wait for a period.
func (b *beats) start(nc *nats.Conn, subject string) error {
	b.seen = map[string]heartbeat{}
	inbox := nats.NewInbox()
	for _, s := range []string{subject, inbox} {
		sub, err := nc.Subscribe(s, b.record)
		if err != nil {
			b.stop()
			return err
		}
		b.subs = append(b.subs, sub)
	}
	return nc.PublishRequest(subject+".ping", inbox, nil)
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
	var out []heartbeat
	for id, hb := range b.seen {
		if time.Since(hb.At) > workerGone {
			delete(b.seen, id)
			continue
		}
		out = append(out, hb)
	}
	slices.SortFunc(out, func(a, b heartbeat) int { return strings.Compare(a.ID, b.ID) })
	return out
}
