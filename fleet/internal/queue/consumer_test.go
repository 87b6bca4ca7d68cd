package queue_test

import (
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/fleet/internal/queue"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

type consumerFixture struct {
	t  testing.TB
	js jetstream.JetStream
	s  job.Subjects
}

func newConsumerFixture(t testing.TB) *consumerFixture {
	srv := testenv.StartNATS(t)
	js, err := jetstream.New(srv.Conn())
	if err != nil {
		t.Fatal(err)
	}
	s, _ := job.NewSubjects("")
	if err := protocol.EnsureStreams(t.Context(), js, s, protocol.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	return &consumerFixture{t: t, js: js, s: s}
}

func (f *consumerFixture) publish(tenant, id string) {
	f.t.Helper()
	if _, err := f.js.Publish(f.t.Context(), f.s.Job("default", tenant, id), []byte("{}")); err != nil {
		f.t.Fatal(err)
	}
}

// discover reads the discovery consumer's next message and acks it, as a worker does once the
// tenant's consumer exists: it returns the tenant consumer made at the floor before the ack.
func (f *consumerFixture) discover(d *queue.Source) *queue.Source {
	f.t.Helper()
	m, err := d.Next(10 * time.Second)
	if err != nil || m == nil {
		f.t.Fatalf("discovery Next() = %v, %v; want a message", m, err)
	}
	if len(m.Data()) != 0 {
		f.t.Errorf("discovery message carries %d bytes of body, want headers only", len(m.Data()))
	}
	_, tenant, _, err := f.s.ParseJob(m.Subject())
	if err != nil {
		f.t.Fatal(err)
	}
	floor, err := d.Floor(f.t.Context())
	if err != nil {
		f.t.Fatal(err)
	}
	src, err := queue.TenantConsumer(f.t.Context(), f.js, f.s, queue.Pair{Queue: "default", Tenant: tenant}, floor, d.Remade(), queue.ConsumerOptions{AckWait: time.Second})
	if err != nil {
		f.t.Fatal(err)
	}
	if err := m.DoubleAck(f.t.Context()); err != nil {
		f.t.Fatal(err)
	}
	return src
}

func (f *consumerFixture) next(src *queue.Source) (jetstream.Msg, *jetstream.MsgMetadata) {
	f.t.Helper()
	m, err := src.Next(10 * time.Second)
	if err != nil || m == nil {
		f.t.Fatalf("Next() = %v, %v; want a message", m, err)
	}
	meta, err := m.Metadata()
	if err != nil {
		f.t.Fatal(err)
	}
	return m, meta
}

// TestTenantConsumerStart: a tenant consumer made for its tenant's first job delivers that job
// (stored before the consumer) as a first delivery; one made again after it was lost starts at
// the stream's start, not at the discovery consumer's floor, which passed what the lost one held:
// it replays the tenant's kept requests, each a possible redelivery (issue 38).
func TestTenantConsumerStart(t *testing.T) {
	f := newConsumerFixture(t)
	f.publish("acme", "first")
	d, err := queue.Discovery(t.Context(), f.js, f.s, "default")
	if err != nil {
		t.Fatal(err)
	}
	if !d.Remade().IsZero() {
		t.Errorf("a new queue's discovery consumer: Remade() = %v, want zero", d.Remade())
	}
	src := f.discover(d)
	m, meta := f.next(src)
	if m.Subject() != f.s.Job("default", "acme", "first") || src.History(meta) || src.Deliveries(meta) != 1 {
		t.Errorf("first job: %s History = %v Deliveries = %d; want a first delivery of acme's first", m.Subject(), src.History(meta), src.Deliveries(meta))
	}
	if err := m.DoubleAck(t.Context()); err != nil {
		t.Fatal(err)
	}

	if err := f.js.DeleteConsumer(t.Context(), f.s.JobsStream(), f.s.TenantConsumer("default", "acme")); err != nil {
		t.Fatal(err)
	}
	f.publish("acme", "second")
	src = f.discover(d)
	m, meta = f.next(src)
	if m.Subject() != f.s.Job("default", "acme", "first") || !src.History(meta) || src.Deliveries(meta) < 2 {
		t.Errorf("consumer made again: delivered %s (History %v, Deliveries %d), want the kept first as a possible redelivery", m.Subject(), src.History(meta), src.Deliveries(meta))
	}
	if err := m.DoubleAck(t.Context()); err != nil {
		t.Fatal(err)
	}
	m, meta = f.next(src)
	if m.Subject() != f.s.Job("default", "acme", "second") || !src.History(meta) {
		t.Errorf("consumer made again: then delivered %s (History %v), want acme's second, stored before it", m.Subject(), src.History(meta))
	}
}

// TestDiscoveryMadeAgain: a discovery consumer made again (lost, or a queue served by the earlier
// consumer-per-queue layout) replays the stream; the tenant consumers it makes say that what was
// stored before it may have run, and what is stored after it may not.
func TestDiscoveryMadeAgain(t *testing.T) {
	for _, tc := range []struct {
		name string
		lose func(f *consumerFixture)
	}{
		{"discovery deleted", func(f *consumerFixture) {
			d, err := queue.Discovery(f.t.Context(), f.js, f.s, "default")
			if err != nil {
				f.t.Fatal(err)
			}
			f.discover(d)
			if err := f.js.DeleteConsumer(f.t.Context(), f.s.JobsStream(), f.s.Discovery("default")); err != nil {
				f.t.Fatal(err)
			}
			if err := f.js.DeleteConsumer(f.t.Context(), f.s.JobsStream(), f.s.TenantConsumer("default", "acme")); err != nil {
				f.t.Fatal(err)
			}
		}},
		{"served by a consumer per queue", func(f *consumerFixture) {
			// The earlier layout's consumer, marked as it marked it.
			st, err := f.js.Stream(f.t.Context(), f.s.JobsStream())
			if err != nil {
				f.t.Fatal(err)
			}
			cfg := st.CachedInfo().Config
			cfg.Metadata = map[string]string{protocol.FirstMadeKey(f.s.Consumer("default")): time.Now().UTC().Format(time.RFC3339Nano)}
			if _, err := f.js.UpdateStream(f.t.Context(), cfg); err != nil {
				f.t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newConsumerFixture(t)
			f.publish("acme", "kept")
			tc.lose(f)
			d, err := queue.Discovery(t.Context(), f.js, f.s, "default")
			if err != nil {
				t.Fatal(err)
			}
			if d.Remade().IsZero() {
				t.Fatal("Remade() is zero, want the time the discovery consumer was made")
			}
			src := f.discover(d)
			m, meta := f.next(src)
			if m.Subject() != f.s.Job("default", "acme", "kept") || !src.History(meta) || src.Deliveries(meta) < 2 {
				t.Errorf("kept request: %s History = %v Deliveries = %d; want a possible redelivery", m.Subject(), src.History(meta), src.Deliveries(meta))
			}
			if err := m.DoubleAck(t.Context()); err != nil {
				t.Fatal(err)
			}
			f.publish("acme", "after")
			m, meta = f.next(src)
			if m.Subject() != f.s.Job("default", "acme", "after") || src.History(meta) || src.Deliveries(meta) != 1 {
				t.Errorf("stored after: %s History = %v Deliveries = %d; want a first delivery", m.Subject(), src.History(meta), src.Deliveries(meta))
			}
		})
	}
}

// TestOldestWaiting: the oldest wait of a tenant consumer is its first undelivered job's, other
// tenants' jobs between them do not count, and nothing waiting is the zero time.
func TestOldestWaiting(t *testing.T) {
	f := newConsumerFixture(t)
	stored := func(tenant, id string) time.Time {
		f.publish(tenant, id)
		m, err := f.js.Stream(t.Context(), f.s.JobsStream())
		if err != nil {
			t.Fatal(err)
		}
		msg, err := m.GetLastMsgForSubject(t.Context(), f.s.Job("default", tenant, id))
		if err != nil {
			t.Fatal(err)
		}
		return msg.Time
	}
	first := stored("acme", "a1")
	d, err := queue.Discovery(t.Context(), f.js, f.s, "default")
	if err != nil {
		t.Fatal(err)
	}
	src := f.discover(d)
	stored("beta", "b1")
	second := stored("acme", "a2")
	oldest := func() time.Time {
		t.Helper()
		testenv.WaitFor(t, 10*time.Second, "acme's backlog counted", func() bool {
			b, err := queue.Tenants(t.Context(), f.js, f.s)
			return err == nil && b[queue.Pair{Queue: "default", Tenant: "acme"}].Pending+uint64(b[queue.Pair{Queue: "default", Tenant: "acme"}].AckPending) == 2
		})
		b, err := queue.Tenants(t.Context(), f.js, f.s)
		if err != nil {
			t.Fatal(err)
		}
		jobs, err := f.js.Stream(t.Context(), f.s.JobsStream())
		if err != nil {
			t.Fatal(err)
		}
		at, err := queue.OldestWaiting(t.Context(), jobs, f.s, queue.Pair{Queue: "default", Tenant: "acme"}, b[queue.Pair{Queue: "default", Tenant: "acme"}])
		if err != nil {
			t.Fatal(err)
		}
		return at
	}
	if at := oldest(); !at.Equal(first) {
		t.Errorf("OldestWaiting() with a1 and a2 waiting = %v, want a1's %v", at, first)
	}
	f.next(src) // a1 delivered, not acked: running
	if at := oldest(); !at.Equal(second) {
		t.Errorf("OldestWaiting() with a1 running = %v, want a2's %v", at, second)
	}
	f.next(src)
	if at := oldest(); !at.IsZero() {
		t.Errorf("OldestWaiting() with none waiting = %v, want zero", at)
	}
}

// TestFirstMadeSurvivesStreamUpdate: the marker of a discovery consumer's first making survives
// an update of the jobs stream made from a read of its configuration before the marker was set
// (a worker applying --retention while another makes the queue's first consumer): the consumer,
// lost afterwards, is made again knowing that it replaces one (issue 38 item 4).
func TestFirstMadeSurvivesStreamUpdate(t *testing.T) {
	f := newConsumerFixture(t)
	st, err := f.js.Stream(t.Context(), f.s.JobsStream())
	if err != nil {
		t.Fatal(err)
	}
	stale := st.CachedInfo().Config
	if _, err := queue.Discovery(t.Context(), f.js, f.s, "default"); err != nil {
		t.Fatal(err)
	}
	stale.MaxAge = 48 * time.Hour
	if _, err := f.js.UpdateStream(t.Context(), stale); err != nil {
		t.Fatal(err)
	}
	if err := f.js.DeleteConsumer(t.Context(), f.s.JobsStream(), f.s.Discovery("default")); err != nil {
		t.Fatal(err)
	}
	d, err := queue.Discovery(t.Context(), f.js, f.s, "default")
	if err != nil {
		t.Fatal(err)
	}
	if d.Remade().IsZero() {
		t.Error("discovery consumer made again after a stream update: Remade() is zero, want its making (the marker was erased)")
	}
}

// TestDiscoveryWhileDeleted: a worker opens the discovery consumer while another worker makes
// it again after it was deleted. The server then answers a 500 ("consumer closed") or "does not
// exist" for a moment, or keeps the consumer made again without its directory and answers every
// later create of it with a 500 (a missing meta.inf.tmp), which ended a starting worker in the
// soak test; every open succeeds.
func TestDiscoveryWhileDeleted(t *testing.T) {
	f := newConsumerFixture(t)
	if _, err := queue.Discovery(t.Context(), f.js, f.s, "default"); err != nil {
		t.Fatal(err)
	}
	for round := range 30 {
		var wg sync.WaitGroup
		var racing error
		wg.Go(func() { _ = f.js.DeleteConsumer(t.Context(), f.s.JobsStream(), f.s.Discovery("default")) })
		wg.Go(func() { _, racing = queue.Discovery(t.Context(), f.js, f.s, "default") })
		wg.Wait()
		if racing != nil {
			t.Errorf("round %d: Discovery() beside the delete: %v", round, racing)
		}
		if _, err := queue.Discovery(t.Context(), f.js, f.s, "default"); err != nil {
			t.Fatalf("round %d: Discovery() after the delete: %v", round, err)
		}
	}
}
