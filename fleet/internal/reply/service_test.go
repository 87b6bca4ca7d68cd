package reply_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/runfleet/runfleet/fleet/internal/reply"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errRefused = errors.New("refused")

// list answers a page with one row per Limit, refuses a limit of 7 and fails on 13.
func list(_ context.Context, q job.ListQuery) (job.JobList, error) {
	switch q.Limit {
	case 7:
		return job.JobList{}, errRefused
	case 13:
		return job.JobList{}, errors.New("redis: connection refused at 10.0.0.3:6379")
	}
	return job.JobList{Jobs: make([]job.Listed, q.Limit)}, nil
}

func classify(err error) *protocol.ServiceError {
	switch {
	case errors.Is(err, job.ErrInvalidQuery):
		return &protocol.ServiceError{Code: 400, Message: err.Error()}
	case errors.Is(err, errRefused):
		return &protocol.ServiceError{Code: 409, Reason: protocol.ReasonMayHaveRun, Message: err.Error()}
	}
	return &protocol.ServiceError{Code: 500, Reason: protocol.ReasonUnavailable, Message: "unavailable"}
}

func start(t testing.TB, nc *nats.Conn, subject string) *reply.Server {
	t.Helper()
	s, err := reply.Start(t.Context(), nc, reply.Config{
		Name:       "test",
		QueueGroup: "test-group",
		Endpoints:  []reply.Endpoint{{Name: "list", Subject: subject, Answer: reply.JSON(list)}},
		Timeout:    time.Second,
		Classify:   classify,
		Log:        slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestAnswers: the wire of docs/protocol.md — JSON, or the error headers the client parses.
func TestAnswers(t *testing.T) {
	n := testenv.StartNATS(t)
	nc := n.Conn()
	s := start(t, nc, "t.list")
	defer func() {
		if err := s.Stop(); err != nil {
			t.Errorf("Stop() = %v", err)
		}
	}()
	client := n.Conn()
	for _, tt := range []struct {
		name string
		body string
		want *protocol.ServiceError // nil: a JSON page
	}{
		{"page", `{"limit":3}`, nil},
		{"bad body", `{`, &protocol.ServiceError{Code: 400, Message: "invalid list query: unexpected end of JSON input"}},
		{"refused", `{"limit":7}`, &protocol.ServiceError{Code: 409, Reason: "may_have_run", Message: "refused"}},
		{"failed", `{"limit":13}`, &protocol.ServiceError{Code: 500, Reason: "unavailable", Message: "unavailable"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, err := client.Request("t.list", []byte(tt.body), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			got := protocol.ErrorOf(m.Header)
			switch {
			case tt.want == nil && got != nil:
				t.Fatalf("answer = %+v, want a page", got)
			case tt.want != nil && (got == nil || *got != *tt.want):
				t.Fatalf("answer = %+v (%s), want %+v", got, m.Data, tt.want)
			case tt.want != nil && (len(m.Data) != 0 || m.Header.Get("Runfleet-Reason") != tt.want.Reason):
				t.Errorf("error answer: body %q, reason %q", m.Data, m.Header.Get("Runfleet-Reason"))
			}
			var l job.JobList
			if tt.want == nil && (json.Unmarshal(m.Data, &l) != nil || len(l.Jobs) != 3) {
				t.Errorf("page = %s, want 3 rows", m.Data)
			}
		})
	}
}

// TestQueueGroup: two servers of a service share its requests, one answer each; once both stop,
// nothing answers.
func TestQueueGroup(t *testing.T) {
	n := testenv.StartNATS(t)
	a, b := start(t, n.Conn(), "t.list"), start(t, n.Conn(), "t.list")
	client := n.Conn()
	inbox := nats.NewInbox()
	replies, err := client.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	const requests = 20
	for range requests {
		if err := client.PublishRequest("t.list", inbox, []byte(`{"limit":1}`)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range requests {
		if _, err := replies.NextMsg(5 * time.Second); err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
	}
	if m, err := replies.NextMsg(100 * time.Millisecond); err == nil {
		t.Errorf("reply %d = %s, want %d replies", requests+1, m.Data, requests)
	}
	for _, s := range []*reply.Server{a, b} {
		if err := s.Stop(); err != nil {
			t.Errorf("Stop() = %v", err)
		}
	}
	// Stop drains: the server forgets the subscriptions a moment later.
	testenv.WaitFor(t, 10*time.Second, "no responders", func() bool {
		_, err := client.Request("t.list", []byte(`{}`), 200*time.Millisecond)
		return errors.Is(err, nats.ErrNoResponders)
	})
}
