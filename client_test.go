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
	_, lookupID := c.Lookup(ctx, "a b")
	_, redriveID := c.Redrive(ctx, "a b", nil)
	_, requestID := c.Request(ctx, "a b")
	for name, err := range map[string]error{"Lookup": lookupID, "Redrive": redriveID, "Request": requestID, "Cancel": c.Cancel(ctx, "a b")} {
		je, ok := errors.AsType[*runfleet.JobError](err)
		if !ok || je.ID != "a b" || !errors.Is(err, job.ErrInvalidID) || !strings.HasPrefix(err.Error(), `job "a b": `) {
			t.Errorf("%s(%q): error = %v, want a *JobError quoting the id, wrapping job.ErrInvalidID", name, "a b", err)
		}
	}
}

// TestJobErrorNamesTheJobOnce: a settlement's error already names its job, and the JobError
// around it does not say it twice.
func TestJobErrorNamesTheJobOnce(t *testing.T) {
	three := 3
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"failed", &runfleet.JobError{ID: "j", Err: job.Settlement{JobID: "j", Status: job.StatusFailed, Reason: job.ReasonExitNonzero, ExitCode: &three}.Err()},
			"job j failed: exit_nonzero 3"},
		{"rejected", &runfleet.JobError{ID: "j", Err: job.Settlement{JobID: "j", Status: job.StatusRejected, Reason: job.ReasonUnknownLanguage}.Err()},
			"job j rejected: unknown_language"},
		{"validation", &runfleet.JobError{ID: "j", Err: &job.RejectError{Reason: job.ReasonMissingLanguage}},
			"job j: rejected: missing_language"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.want {
				t.Errorf("Error() = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestSubmitManyResults: a batch says per job what happened, in the request order: a new id is
// stored, one stored before and one repeated in the batch are duplicates, a bad request is
// refused alone, and a request without an id gets one.
func TestSubmitManyResults(t *testing.T) {
	c, _ := newClient(t, runfleet.Options{})
	ctx := t.Context()
	queue := "submit-many-" + strings.ToLower(job.NewID()[:8])
	if _, err := c.Submit(ctx, queue, job.Request{ID: "many-before-" + queue, Language: "python3", Code: "x"}, nil); err != nil {
		t.Fatal(err)
	}
	reqs := []job.Request{
		{ID: "many-a-" + queue, Language: "python3", Code: "x"},
		{ID: "many-before-" + queue, Language: "python3", Code: "x"},
		{ID: "many-a-" + queue, Language: "python3", Code: "x"},
		{ID: "many-bad-" + queue, Language: "python3"},
		{Language: "python3", Code: "x"},
	}
	got := c.SubmitMany(ctx, queue, reqs, nil)
	if len(got) != len(reqs) {
		t.Fatalf("SubmitMany returned %d results, want %d", len(got), len(reqs))
	}
	for i, want := range []struct {
		dup    bool
		reason job.Reason
	}{{false, ""}, {true, ""}, {true, ""}, {false, job.ReasonMissingCode}, {false, ""}} {
		r := got[i]
		if want.reason != "" {
			re, ok := errors.AsType[*job.RejectError](r.Err)
			je, named := errors.AsType[*runfleet.JobError](r.Err)
			if !ok || re.Reason != want.reason || !named || je.ID != reqs[i].ID {
				t.Errorf("result %d: error = %v, want a *JobError of %s with reason %s", i, r.Err, reqs[i].ID, want.reason)
			}
			continue
		}
		if r.Err != nil || r.Duplicate != want.dup || !job.ValidID(r.ID) || (reqs[i].ID != "" && r.ID != reqs[i].ID) {
			t.Errorf("result %d = %+v, want id %q stored with duplicate %v", i, r, reqs[i].ID, want.dup)
		}
		if !want.dup && r.Sequence == 0 {
			t.Errorf("result %d: sequence 0 for a new job", i)
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
	if _, err := control.GetLastMsgForSubject(ctx, c.Subjects().Cancel("default", id)); !errors.Is(err, jetstream.ErrMsgNotFound) {
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
	m, err := s.GetLastMsgForSubject(t.Context(), c.Subjects().Settled("default", st.JobID))
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

// TestJobsWalksTheCursor: Jobs yields every job a filter selects across pages, newest first, and
// asks for no page after the consumer stops.
func TestJobsWalksTheCursor(t *testing.T) {
	tenant := "walk-" + strings.ToLower(job.NewID()[:8])
	c, _ := newClient(t, runfleet.Options{Tenant: tenant})
	ctx := t.Context()
	var ids []string
	for range 3 {
		st, err := c.Run(ctx, "default", job.Request{Language: "python3", Code: "print(1)"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append([]string{st.JobID}, ids...)
	}
	q := job.ListQuery{Tenant: tenant, Limit: 1}
	var got []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		got = got[:0]
		for j, err := range c.Jobs(ctx, q) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, j.JobID)
		}
		if len(got) == len(ids) {
			break
		}
	}
	if strings.Join(got, " ") != strings.Join(ids, " ") {
		t.Errorf("Jobs(limit 1) = %v, want %v", got, ids)
	}
	n := 0
	for range c.Jobs(ctx, q) {
		n++
		break
	}
	if n != 1 {
		t.Errorf("Jobs stopped after the first: %d rows, want 1", n)
	}
	var errs []error
	for _, err := range c.Jobs(ctx, job.ListQuery{Limit: -1}) {
		errs = append(errs, err)
	}
	if len(errs) != 1 || !errors.Is(errs[0], job.ErrInvalidQuery) {
		t.Errorf("Jobs(limit -1) yielded %v, want job.ErrInvalidQuery once", errs)
	}
}
