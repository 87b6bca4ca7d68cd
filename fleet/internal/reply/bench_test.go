package reply_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// BenchmarkRoundTrip times one request and its answer — a page of 20 rows — against an embedded
// server, answered through micro (Start) and by the hand-rolled queue subscription the job index
// and the redrives used before (handRolled). micro is kept while it costs within 10% per request.
func BenchmarkRoundTrip(b *testing.B) {
	n := testenv.StartNATS(b)
	client := n.Conn()
	body := []byte(`{"limit":20}`)
	for _, tc := range []struct {
		name  string
		serve func(b *testing.B, nc *nats.Conn, subject string) (stop func())
	}{
		{"micro", func(b *testing.B, nc *nats.Conn, subject string) func() {
			s := start(b, nc, subject)
			return func() { _ = s.Stop() }
		}},
		{"hand-rolled", handRolled},
	} {
		b.Run(tc.name, func(b *testing.B) {
			subject := "bench." + tc.name
			nc := n.Conn()
			stop := tc.serve(b, nc, subject)
			defer stop()
			if err := nc.Flush(); err != nil { // the server has the subscriptions
				b.Fatal(err)
			}
			for b.Loop() {
				m, err := client.Request(subject, body, 5*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				if m.Header.Get("Nats-Service-Error") != "" {
					b.Fatalf("answer: %s", m.Header.Get("Nats-Service-Error"))
				}
			}
		})
	}
}

// handRolled is the job index's Serve before micro: a channel queue subscription, one goroutine
// answering, the error headers set by hand.
func handRolled(b *testing.B, nc *nats.Conn, subject string) func() {
	msgs := make(chan *nats.Msg, 64)
	sub, err := nc.ChanQueueSubscribe(subject, "bench", msgs)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case m := <-msgs:
				var q job.ListQuery
				if err := json.Unmarshal(m.Data, &q); err != nil {
					r := nats.NewMsg(m.Reply)
					r.Header.Set("Nats-Service-Error", err.Error())
					r.Header.Set("Nats-Service-Error-Code", fmt.Sprint(400))
					_ = m.RespondMsg(r)
					continue
				}
				qctx, qcancel := context.WithTimeout(ctx, time.Second)
				l, _ := list(qctx, q)
				qcancel()
				out, _ := json.Marshal(l)
				_ = m.Respond(out)
			}
		}
	})
	return func() {
		_ = sub.Unsubscribe()
		cancel()
		wg.Wait()
	}
}
