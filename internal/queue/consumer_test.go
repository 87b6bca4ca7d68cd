package queue_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/internal/queue"
	"github.com/runfleet/runfleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// TestConsumerMadeAgain: the first consumer of a queue serves what was stored before it as first
// deliveries (a fleet's first worker may start after jobs came), and so does the same consumer
// opened again; one made again after it was lost says that what was stored before it may have
// run, and nothing stored after it.
func TestConsumerMadeAgain(t *testing.T) {
	ctx := t.Context()
	srv := testenv.StartNATS(t)
	js, err := jetstream.New(srv.Conn())
	if err != nil {
		t.Fatal(err)
	}
	s, _ := job.NewSubjects("")
	if err := runfleet.EnsureStreams(ctx, js, s, runfleet.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	publish := func(id string) {
		t.Helper()
		if _, err := js.Publish(ctx, s.Job("default", "default", id), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	// next delivers the next message of a fresh opening of the queue's consumer, unacked.
	next := func(t *testing.T) (*queue.Source, jetstream.Msg, *jetstream.MsgMetadata) {
		t.Helper()
		src, err := queue.Consumer(ctx, js, s, "default", queue.ConsumerOptions{AckWait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		m, err := src.Next(10 * time.Second)
		if err != nil || m == nil {
			t.Fatalf("Next() = %v, %v; want a message", m, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		return src, m, meta
	}
	publish("before-first")
	src, m, meta := next(t)
	if src.History(meta) || src.Deliveries(meta) != 1 {
		t.Errorf("first consumer: History = %v, Deliveries = %d; want a first delivery", src.History(meta), src.Deliveries(meta))
	}
	if err := m.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	publish("second")
	if src, _, meta := next(t); src.History(meta) || src.Deliveries(meta) != 1 {
		t.Errorf("the first consumer opened again: History = %v, Deliveries = %d; want a first delivery", src.History(meta), src.Deliveries(meta))
	}

	if err := js.DeleteConsumer(ctx, s.JobsStream(), s.Consumer("default")); err != nil {
		t.Fatal(err)
	}
	src, m, meta = next(t)
	if m.Subject() != s.Job("default", "default", "before-first") || !src.History(meta) || src.Deliveries(meta) != 2 {
		t.Errorf("consumer made again: %s History = %v, Deliveries = %d; want before-first, a possible redelivery", m.Subject(), src.History(meta), src.Deliveries(meta))
	}
	publish("after")
	for {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
		if m.Subject() == s.Job("default", "default", "after") {
			break
		}
		if m, err = src.Next(10 * time.Second); err != nil || m == nil {
			t.Fatalf("Next() = %v, %v; want the message stored after", m, err)
		}
	}
	if meta, _ := m.Metadata(); src.History(meta) || src.Deliveries(meta) != 1 {
		t.Errorf("stored after the consumer was made again: History = %v; want a first delivery", src.History(meta))
	}
}
