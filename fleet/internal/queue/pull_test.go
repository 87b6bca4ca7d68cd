package queue_test

import (
	"errors"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/fleet/internal/queue"
)

// TestPuller fetches as jetstream's FetchNoWait does: what waits, no more, with the same metadata,
// and acks that reach the server.
func TestPuller(t *testing.T) {
	f := newConsumerFixture(t)
	src, err := queue.TenantConsumer(t.Context(), f.js, f.s, queue.Pair{Queue: "default", Tenant: "acme"}, 0, time.Time{}, queue.ConsumerOptions{AckWait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	nc := f.js.Conn()
	p, err := queue.NewPuller(nc, f.js)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	if msgs, err := p.FetchNoWait(t.Context(), src, 4); err != nil || len(msgs) != 0 {
		t.Fatalf("FetchNoWait of an empty consumer = %d messages, %v; want 0, nil", len(msgs), err)
	}
	for _, id := range []string{"a", "b", "c"} {
		f.publish("acme", id)
	}
	// The server counts a stored message in its consumer a moment after the publish's ack.
	var msgs []jetstream.Msg
	for deadline := time.Now().Add(10 * time.Second); len(msgs) < 3 && time.Now().Before(deadline); {
		got, err := p.FetchNoWait(t.Context(), src, 4)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, got...)
	}
	if len(msgs) != 3 {
		t.Fatalf("fetched %d messages, want 3", len(msgs))
	}
	for i, m := range msgs {
		meta, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		if want := f.s.Job("default", "acme", []string{"a", "b", "c"}[i]); m.Subject() != want {
			t.Errorf("message %d subject %q, want %q", i, m.Subject(), want)
		}
		if meta.Stream != f.s.JobsStream() || meta.Consumer != src.CachedInfo().Name || meta.NumDelivered != 1 ||
			meta.Sequence.Stream != uint64(i+1) || meta.Sequence.Consumer != uint64(i+1) || meta.NumPending != uint64(2-i) ||
			time.Since(meta.Timestamp) > time.Minute {
			t.Errorf("message %d metadata %+v", i, meta)
		}
	}
	if err := msgs[0].DoubleAck(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := msgs[0].Ack(); !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
		t.Errorf("second ack: %v, want ErrMsgAlreadyAckd", err)
	}
	if err := msgs[1].InProgress(); err != nil {
		t.Fatal(err)
	}
	if err := msgs[1].Term(); err != nil {
		t.Fatal(err)
	}
	if err := msgs[2].Nak(); err != nil {
		t.Fatal(err)
	}
	// Only the nak'd message comes again, at once and counted as a second delivery.
	var again []jetstream.Msg
	for deadline := time.Now().Add(10 * time.Second); len(again) == 0 && time.Now().Before(deadline); {
		if again, err = p.FetchNoWait(t.Context(), src, 4); err != nil {
			t.Fatal(err)
		}
	}
	if len(again) != 1 || again[0].Subject() != f.s.Job("default", "acme", "c") {
		t.Fatalf("after ack, term and nak: fetched %d messages, want the nak'd one", len(again))
	}
	if meta, err := again[0].Metadata(); err != nil || meta.NumDelivered != 2 {
		t.Errorf("redelivery metadata %+v, %v; want NumDelivered 2", meta, err)
	}
	if err := again[0].NakWithDelay(time.Hour); err != nil {
		t.Fatal(err)
	}
	info, err := src.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.AckFloor.Stream != 2 {
		t.Errorf("ack floor %d, want 2 (a acked, b terminated, c nak'd for an hour)", info.AckFloor.Stream)
	}
}

// TestPullerConsumerGone: a fetch from a consumer that no longer exists fails at once, not at the
// timeout.
func TestPullerConsumerGone(t *testing.T) {
	f := newConsumerFixture(t)
	src, err := queue.TenantConsumer(t.Context(), f.js, f.s, queue.Pair{Queue: "default", Tenant: "acme"}, 0, time.Time{}, queue.ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.js.DeleteConsumer(t.Context(), f.s.JobsStream(), src.CachedInfo().Name); err != nil {
		t.Fatal(err)
	}
	p, err := queue.NewPuller(f.js.Conn(), f.js)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	start := time.Now()
	if msgs, err := p.FetchNoWait(t.Context(), src, 1); err == nil || len(msgs) != 0 {
		t.Errorf("FetchNoWait of a deleted consumer = %d messages, %v; want an error", len(msgs), err)
	} else if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the error took %s", d)
	}
}

// BenchmarkFetchOne: one job fetched and acked at a time, the common case with a consumer per
// tenant, by jetstream's FetchNoWait (a subscription, a goroutine and a timer per fetch) and by a
// Puller (one subscription for all). cpu-µs/op is the whole process's, the embedded server's
// included.
//
//	go test -run '^$' -bench FetchOne -count 6 ./internal/queue/
func BenchmarkFetchOne(b *testing.B) {
	for _, name := range []string{"jetstream", "puller"} {
		b.Run(name, func(b *testing.B) {
			f := newConsumerFixture(b)
			src, err := queue.TenantConsumer(b.Context(), f.js, f.s, queue.Pair{Queue: "default", Tenant: "acme"}, 0, time.Time{}, queue.ConsumerOptions{})
			if err != nil {
				b.Fatal(err)
			}
			p, err := queue.NewPuller(f.js.Conn(), f.js)
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			fetch := func() ([]jetstream.Msg, error) { return p.FetchNoWait(b.Context(), src, 1) }
			if name == "jetstream" {
				fetch = func() ([]jetstream.Msg, error) {
					batch, err := src.FetchNoWait(1)
					if err != nil {
						return nil, err
					}
					var msgs []jetstream.Msg
					for m := range batch.Messages() {
						msgs = append(msgs, m)
					}
					return msgs, batch.Error()
				}
			}
			for i := range b.N {
				if _, err := f.js.PublishAsync(f.s.Job("default", "acme", "j"+strconv.Itoa(i)), []byte("{}")); err != nil {
					b.Fatal(err)
				}
			}
			<-f.js.PublishAsyncComplete()
			cpu0 := processCPU()
			b.ResetTimer()
			for n := 0; n < b.N; {
				msgs, err := fetch()
				if err != nil {
					b.Fatal(err)
				}
				for _, m := range msgs {
					if err := m.Ack(); err != nil {
						b.Fatal(err)
					}
				}
				n += len(msgs)
			}
			b.StopTimer()
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// processCPU is the user and system time this process used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestPullerStatusHeaders: a job a publisher gave a Status header (with an empty body, as every job
// of a headers-only discovery consumer has) is a job to the Puller, not a server status: none ends
// a batch early, none is dropped, and the batch after them still comes.
func TestPullerStatusHeaders(t *testing.T) {
	f := newConsumerFixture(t)
	p, err := queue.NewPuller(f.js.Conn(), f.js)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	d, err := queue.Discovery(t.Context(), f.js, f.s, "default")
	if err != nil {
		t.Fatal(err)
	}
	tc, err := queue.TenantConsumer(t.Context(), f.js, f.s, queue.Pair{Queue: "default", Tenant: "acme"}, 0, time.Time{}, queue.ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hostile := []nats.Header{
		{"Status": {"404"}, "Description": {"No Messages"}},
		{"Status": {"100"}},
		{"Status": {"408"}, "Description": {"Request Timeout"}},
		{"Status": {"409"}, "Description": {"Consumer Deleted"}},
	}
	for i, h := range hostile {
		m := &nats.Msg{Subject: f.s.Job("default", "acme", "poison-"+strconv.Itoa(i)), Header: h}
		if _, err := f.js.PublishMsg(t.Context(), m); err != nil {
			t.Fatal(err)
		}
	}
	f.publish("acme", "victim")
	want := len(hostile) + 1

	for name, fetch := range map[string]func() ([]jetstream.Msg, error){
		"discovery, waiting": func() ([]jetstream.Msg, error) {
			var got []jetstream.Msg
			err := p.Fetch(t.Context(), d, 256, time.Second, func(m jetstream.Msg) { got = append(got, m) })
			return got, err
		},
		"tenant, no wait": func() ([]jetstream.Msg, error) { return p.FetchNoWait(t.Context(), tc, 256) },
	} {
		var got []jetstream.Msg
		for deadline := time.Now().Add(10 * time.Second); len(got) < want && time.Now().Before(deadline); {
			msgs, err := fetch()
			if err != nil {
				t.Fatalf("%s: fetch after %d messages: %v", name, len(got), err)
			}
			got = append(got, msgs...)
		}
		if len(got) != want {
			t.Fatalf("%s: fetched %d messages, want %d (the status-headed jobs and the victim)", name, len(got), want)
		}
		for _, m := range got {
			if err := m.Ack(); err != nil {
				t.Errorf("%s: ack %s: %v", name, m.Subject(), err)
			}
		}
	}
}
