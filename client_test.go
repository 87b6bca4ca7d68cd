package runfleet_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/job"
)

func dial(t testing.TB) *nats.Conn {
	t.Helper()
	needFleet(t)
	nc, err := nats.Connect(os.Getenv("NATS_URL"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// newClient returns a client of the examples' fleet and its connection.
func newClient(t testing.TB, o runfleet.Options) (*runfleet.Client, jetstream.JetStream) {
	t.Helper()
	nc := dial(t)
	c, err := runfleet.NewClient(t.Context(), nc, o)
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return c, js
}

// TestBadNamesMatch: a bad id, queue or prefix is an error callers match, before any request.
func TestBadNamesMatch(t *testing.T) {
	c, _ := newClient(t, runfleet.Options{})
	ctx := t.Context()
	_, submitID := c.Submit(ctx, "", job.Request{ID: "a.b", Language: "python3", Code: "x"}, nil)
	_, submitQueue := c.Submit(ctx, "Bad Queue", job.Request{Language: "python3", Code: "x"}, nil)
	_, watchID := c.Watch(ctx, "a>", nil)
	_, settlementID := c.Settlement(ctx, "")
	_, prefix := runfleet.NewClient(ctx, dial(t), runfleet.Options{Prefix: "Bad"})
	for _, check := range []struct {
		name      string
		err, want error
	}{
		{"Submit id", submitID, job.ErrInvalidID},
		{"Submit queue", submitQueue, job.ErrInvalidQueue},
		{"Watch id", watchID, job.ErrInvalidID},
		{"Settlement id", settlementID, job.ErrInvalidID},
		{"Cancel id", c.Cancel(ctx, "a*"), job.ErrInvalidID},
		{"NewClient prefix", prefix, job.ErrInvalidPrefix},
	} {
		if !errors.Is(check.err, check.want) {
			t.Errorf("%s: error = %v, want %v", check.name, check.err, check.want)
		}
	}
}

// TestSubmitRefusesWhatEveryWorkerRejects: a request the protocol rejects is a *job.RejectError
// before anything is stored, an oversized body is payload_too_large (not the connection's
// "maximum payload exceeded"), and SubmitRaw over the server's max_payload says the same.
func TestSubmitRefusesWhatEveryWorkerRejects(t *testing.T) {
	c, _ := newClient(t, runfleet.Options{})
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		req  job.Request
		want job.Reason
	}{
		{"no language", job.Request{Code: "x"}, job.ReasonMissingLanguage},
		{"negative limit", job.Request{Language: "python3", Code: "x", Limits: job.Limits{Timeout: -time.Second}}, job.ReasonInvalidLimits},
		{"bad env name", job.Request{Language: "python3", Code: "x", Env: map[string]string{"A=B": "1"}}, job.ReasonInvalidEnv},
		{"over the body limit", job.Request{Language: "python3", Code: "x", Stdin: strings.Repeat("a", 1_000_000)}, job.ReasonPayloadTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.ID = "refused-" + strings.ReplaceAll(tc.name, " ", "-")
			_, err := c.Submit(ctx, "", tc.req, nil)
			var re *job.RejectError
			if !errors.As(err, &re) || re.Reason != tc.want {
				t.Fatalf("Submit() error = %v, want a RejectError %s", err, tc.want)
			}
			if _, err := c.Settlement(ctx, tc.req.ID); !errors.Is(err, runfleet.ErrNotFound) {
				t.Errorf("Settlement() after a refused submit: error = %v, want ErrNotFound (nothing stored)", err)
			}
		})
	}
	_, err := c.SubmitRaw(ctx, "", "raw-too-large", make([]byte, 2<<20), nil)
	var re *job.RejectError
	if !errors.As(err, &re) || re.Reason != job.ReasonPayloadTooLarge {
		t.Errorf("SubmitRaw() of 2 MiB error = %v, want payload_too_large", err)
	}
}

// TestLookupsNeverHang: Settlement, Cancel and Watch of an id the fleet never accepted return
// ErrNotFound at once, and the cancel is not stored; a lookup whose ctx ended wraps ctx's error.
func TestLookupsNeverHang(t *testing.T) {
	c, js := newClient(t, runfleet.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // a backstop, far above what a lookup takes
	defer cancel()
	const id = "never-accepted"
	if _, err := c.Settlement(ctx, id); !errors.Is(err, runfleet.ErrNotFound) {
		t.Errorf("Settlement() error = %v, want ErrNotFound", err)
	}
	if _, err := c.Watch(ctx, id, nil); !errors.Is(err, runfleet.ErrNotFound) {
		t.Errorf("Watch() error = %v, want ErrNotFound", err)
	}
	if err := c.Cancel(ctx, id); !errors.Is(err, runfleet.ErrNotFound) {
		t.Errorf("Cancel() error = %v, want ErrNotFound", err)
	}
	control, err := js.Stream(ctx, c.Subjects().ControlStream())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := control.GetLastMsgForSubject(ctx, c.Subjects().Cancel(id)); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("a cancel of an unknown id was stored (lookup error %v)", err)
	}
	ended, stop := context.WithCancel(ctx)
	stop()
	if _, err := c.Settlement(ended, id); !errors.Is(err, context.Canceled) {
		t.Errorf("Settlement() with an ended ctx: error = %v, want it to wrap context.Canceled", err)
	}
}

// TestClientMakesNoStreams: NewClient touches no stream (internal/e2e's
// TestLeastPrivilegeSubmitter submits with a user allowed nothing else), and a JetStream the
// caller made (where domains are configured) is the one used.
func TestClientMakesNoStreams(t *testing.T) {
	nc := dial(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := runfleet.NewClient(ctx, nil, runfleet.Options{Prefix: "not-created", JetStream: js}); err != nil {
		t.Fatalf("NewClient() error = %v", err)
	}
	if _, err := js.Stream(ctx, "NOT_CREATED_JOBS"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("NewClient created the jobs stream (lookup error %v)", err)
	}
	c, err := runfleet.NewClient(ctx, nil, runfleet.Options{JetStream: js})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Run(ctx, "", job.Request{Language: "python3", Code: "print(1)"}, nil); err != nil {
		t.Errorf("Run() through the caller's JetStream: %v", err)
	}
}

// TestSubmitHeader: a traceparent set per submit reaches what the job produces.
func TestSubmitHeader(t *testing.T) {
	c, js := newClient(t, runfleet.Options{})
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	st, err := c.Run(t.Context(), "", job.Request{Language: "python3", Code: "print(1)"},
		&runfleet.RunOptions{SubmitOptions: runfleet.SubmitOptions{Header: nats.Header{job.HeaderTraceparent: {tp}}}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(t.Context(), c.Subjects().ResultsStream())
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(t.Context(), c.Subjects().Settled(st.JobID))
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Header.Get(job.HeaderTraceparent); got != tp {
		t.Errorf("settlement's traceparent = %q, want %q", got, tp)
	}
}

// TestPagesStopsEarly: a range over Pages that breaks ends the watch and yields nothing more.
func TestPagesStopsEarly(t *testing.T) {
	c, _ := newClient(t, runfleet.Options{})
	st, err := c.Run(t.Context(), "", job.Request{Language: "python3", Code: "import sys\nfor i in range(3): print(i, flush=True); print(i, file=sys.stderr, flush=True)"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, err := range c.Pages(t.Context(), st.JobID) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		break
	}
	if n != 1 {
		t.Errorf("pages seen = %d, want 1 (a break stops the iteration)", n)
	}
}

// TestWaitingJobIsKnown: a job that waits in the queue behind others, where no worker serves it,
// is known — not settled, cancellable — whether it is its queue's newest message or not.
func TestWaitingJobIsKnown(t *testing.T) {
	c, _ := newClient(t, runfleet.Options{})
	ctx := t.Context()
	ids := []string{"waiting-first", "waiting-second"}
	for _, id := range ids {
		if _, err := c.Submit(ctx, "unserved", job.Request{ID: id, Language: "python3", Code: "print(1)"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		if _, err := c.Settlement(ctx, id); !errors.Is(err, runfleet.ErrNoSettlement) {
			t.Errorf("Settlement(%s) error = %v, want ErrNoSettlement", id, err)
		}
	}
	if err := c.Cancel(ctx, ids[0]); err != nil {
		t.Errorf("Cancel() of a waiting job: %v", err)
	}
}

// TestWatchStoppedEarly: a watch whose ctx ends before it follows the job (here: at once, during
// the lookup) says what every watch stopped before the settlement says, ErrNoSettlement with the
// ctx's error, so that a caller (the gateway cancelling on disconnect) tells it from a failure.
func TestWatchStoppedEarly(t *testing.T) {
	c, _ := newClient(t, runfleet.Options{})
	if _, err := c.Submit(t.Context(), "unserved", job.Request{ID: "watched-briefly", Language: "python3", Code: "print(1)"}, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := c.Watch(ctx, "watched-briefly", func(runfleet.Page) error { return nil })
	if !errors.Is(err, runfleet.ErrNoSettlement) || !errors.Is(err, context.Canceled) {
		t.Errorf("Watch() with an ended ctx error = %v, want ErrNoSettlement and context.Canceled", err)
	}
}
