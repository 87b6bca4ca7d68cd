package jobindex_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/runfleet/runfleet/fleet/internal/jobindex"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newIndex(t testing.TB, o jobindex.Options) *jobindex.Index {
	return jobindex.New(testenv.StartRedis(t).Client(), o)
}

func row(id string, st job.Status, queue, tenant string, at time.Time) job.Listed {
	return job.Listed{JobID: id, Status: st, Queue: queue, Tenant: tenant, Attempt: 1, SettledAt: at.UTC()}
}

// listAll follows the cursor to the end, pages of limit.
func listAll(t *testing.T, x *jobindex.Index, q job.ListQuery) []string {
	t.Helper()
	var ids []string
	for pages := 0; ; pages++ {
		if pages > 10000 {
			t.Fatal("the cursor never ends")
		}
		l, err := x.List(t.Context(), q)
		if err != nil {
			t.Fatalf("List(%+v) = %v", q, err)
		}
		for _, r := range l.Jobs {
			ids = append(ids, r.JobID)
		}
		if l.Cursor == "" {
			return ids
		}
		q.Cursor = l.Cursor
	}
}

func TestListFilters(t *testing.T) {
	t.Parallel()
	x := newIndex(t, jobindex.Options{})
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	rows := []job.Listed{
		row("a", job.StatusFailed, "default", "acme", base),
		row("b", job.StatusUnknown, "default", "acme", base.Add(time.Second)),
		row("c", job.StatusFailed, "gpu", "acme", base.Add(2*time.Second)),
		row("d", job.StatusFailed, "default", "other", base.Add(3*time.Second)),
		row("e", job.StatusSucceeded, "default", "other", base.Add(4*time.Second)),
	}
	if err := x.Add(t.Context(), rows...); err != nil {
		t.Fatal(err)
	}
	// Adding again (an adopting attempt, a repair) changes nothing.
	if err := x.Add(t.Context(), rows[0]); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		q    job.ListQuery
		want []string
	}{
		{"all", job.ListQuery{}, []string{"e", "d", "c", "b", "a"}},
		{"status", job.ListQuery{Status: job.StatusFailed}, []string{"d", "c", "a"}},
		{"queue", job.ListQuery{Queue: "gpu"}, []string{"c"}},
		{"tenant", job.ListQuery{Tenant: "acme"}, []string{"c", "b", "a"}},
		{"status queue tenant", job.ListQuery{Status: job.StatusFailed, Queue: "default", Tenant: "acme"}, []string{"a"}},
		{"since", job.ListQuery{Since: base.Add(3 * time.Second)}, []string{"e", "d"}},
		{"until", job.ListQuery{Until: base.Add(time.Second)}, []string{"a"}},
		{"window", job.ListQuery{Since: base.Add(time.Second), Until: base.Add(3 * time.Second)}, []string{"c", "b"}},
		{"pages of 2", job.ListQuery{Limit: 2}, []string{"e", "d", "c", "b", "a"}},
		{"none", job.ListQuery{Status: job.StatusExpired}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := listAll(t, x, tc.q); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("List(%+v) = %v, want %v", tc.q, got, tc.want)
			}
		})
	}
	l, err := x.List(t.Context(), job.ListQuery{Status: job.StatusFailed, Limit: 1, Count: true})
	if err != nil {
		t.Fatal(err)
	}
	if l.Count == nil || *l.Count != 3 || len(l.Jobs) != 1 {
		t.Errorf("List(count) = %d rows, count %v; want 1 row, count 3", len(l.Jobs), l.Count)
	}
}

// Rows settled in one millisecond are split over pages: each is listed once.
func TestListTies(t *testing.T) {
	t.Parallel()
	x := newIndex(t, jobindex.Options{})
	at := time.Now().Truncate(time.Millisecond)
	var rows []job.Listed
	for i := range 25 {
		rows = append(rows, row(fmt.Sprintf("j%02d", i), job.StatusFailed, "default", "default", at.Add(time.Duration(i/10)*time.Millisecond)))
	}
	if err := x.Add(t.Context(), rows...); err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{1, 3, 7, 10, 25, 100} {
		got := listAll(t, x, job.ListQuery{Limit: limit})
		seen := map[string]bool{}
		for _, id := range got {
			if seen[id] {
				t.Errorf("limit %d: %s listed twice", limit, id)
			}
			seen[id] = true
		}
		if len(got) != len(rows) {
			t.Errorf("limit %d: listed %d rows, want %d", limit, len(got), len(rows))
		}
	}
}

func TestRetention(t *testing.T) {
	t.Parallel()
	x := newIndex(t, jobindex.Options{Retention: time.Hour})
	now := time.Now()
	if err := x.Add(t.Context(), row("old", job.StatusFailed, "default", "default", now.Add(-2*time.Hour))); err != nil {
		t.Fatal(err)
	}
	if err := x.Add(t.Context(), row("new", job.StatusFailed, "default", "default", now)); err != nil {
		t.Fatal(err)
	}
	if got := listAll(t, x, job.ListQuery{}); fmt.Sprint(got) != "[new]" {
		t.Errorf("List = %v, want [new]: a row past the retention is trimmed", got)
	}
}

// TestRetentionOfQuietSets: rows are trimmed where a new row goes, so a filter that gets no more
// rows keeps its old ones in Redis; List and its count still stop at the retention.
func TestRetentionOfQuietSets(t *testing.T) {
	t.Parallel()
	rdb := testenv.StartRedis(t).Client()
	now := time.Now()
	// Kept by an index of a day's retention, then read by one of an hour's.
	if err := jobindex.New(rdb, jobindex.Options{Retention: 24 * time.Hour}).Add(t.Context(),
		row("stale", job.StatusTimedOut, "default", "default", now.Add(-2*time.Hour))); err != nil {
		t.Fatal(err)
	}
	x := jobindex.New(rdb, jobindex.Options{Retention: time.Hour})
	if err := x.Add(t.Context(), row("new", job.StatusFailed, "default", "default", now)); err != nil {
		t.Fatal(err)
	}
	for _, q := range []job.ListQuery{{Status: job.StatusTimedOut}, {Status: job.StatusTimedOut, Since: now.Add(-3 * time.Hour)}} {
		q.Count = true
		got, err := x.List(t.Context(), q)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Jobs) != 0 || got.Count == nil || *got.Count != 0 {
			t.Errorf("List(%+v) = %+v, count %v; want nothing past the retention", q, got.Jobs, got.Count)
		}
	}
}

func TestInvalidQuery(t *testing.T) {
	t.Parallel()
	x := newIndex(t, jobindex.Options{})
	now := time.Now()
	for name, q := range map[string]job.ListQuery{
		"status":  {Status: "bogus"},
		"queue":   {Queue: "a.b"},
		"tenant":  {Tenant: "*"},
		"limit":   {Limit: job.MaxListLimit + 1},
		"window":  {Since: now, Until: now},
		"cursor":  {Cursor: "x"},
		"cursor2": {Cursor: "12.-1"},
	} {
		if _, err := x.List(t.Context(), q); !errors.Is(err, job.ErrInvalidQuery) {
			t.Errorf("%s: List(%+v) = %v, want ErrInvalidQuery", name, q, err)
		}
	}
}

func TestServe(t *testing.T) {
	t.Parallel()
	x := newIndex(t, jobindex.Options{})
	nc := testenv.StartNATS(t).Conn()
	subjects, _ := job.NewSubjects("")
	if err := x.Add(t.Context(), row("a", job.StatusUnknown, "default", "default", time.Now())); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- x.Serve(ctx, nc, subjects, slog.New(slog.DiscardHandler)) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve = %v", err)
		}
	}()
	var reply *natsReply
	testenv.WaitFor(t, 10*time.Second, "an answer", func() bool {
		reply = request(t, nc, subjects.ListJobs(), job.ListQuery{Status: job.StatusUnknown})
		return reply != nil
	})
	var l job.JobList
	if err := json.Unmarshal(reply.data, &l); err != nil || len(l.Jobs) != 1 || l.Jobs[0].JobID != "a" {
		t.Errorf("reply = %s (%v), want job a", reply.data, err)
	}
	reply = request(t, nc, subjects.ListJobs(), job.ListQuery{Status: "bogus"})
	if reply == nil || reply.code != "400" {
		t.Errorf("reply to a bad query = %+v, want code 400", reply)
	}
	// Counts, on their own subject, one answer for several filters.
	reply = request(t, nc, subjects.CountJobs(), job.CountQuery{Queries: []job.ListQuery{
		{Status: job.StatusUnknown}, {Status: job.StatusFailed}, {Tenant: "default"}}})
	var c job.JobCounts
	if err := json.Unmarshal(reply.data, &c); err != nil || fmt.Sprint(c.Counts) != "[1 0 1]" {
		t.Errorf("count reply = %s (%v), want [1 0 1]", reply.data, err)
	}
	reply = request(t, nc, subjects.CountJobs(), job.CountQuery{Queries: make([]job.ListQuery, job.MaxCountQueries+1)})
	if reply == nil || reply.code != "400" {
		t.Errorf("reply to %d filters = %+v, want code 400", job.MaxCountQueries+1, reply)
	}
}

// TestCount: each filter counted as List counts it, the window and the retention included.
func TestCount(t *testing.T) {
	t.Parallel()
	x := newIndex(t, jobindex.Options{Retention: time.Hour})
	now := time.Now()
	for _, r := range []job.Listed{
		row("a", job.StatusFailed, "q1", "acme", now.Add(-30*time.Minute)),
		row("b", job.StatusFailed, "q1", "beta", now.Add(-time.Minute)),
		row("c", job.StatusSucceeded, "q2", "acme", now.Add(-10*time.Second)),
	} {
		if err := x.Add(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	queries := []job.ListQuery{
		{},
		{Status: job.StatusFailed},
		{Status: job.StatusFailed, Queue: "q1", Tenant: "acme"},
		{Queue: "q2"},
		{Tenant: "acme", Since: now.Add(-5 * time.Minute)},
		{Until: now.Add(-20 * time.Minute)},
		{Since: now.Add(-48 * time.Hour)}, // floored at the retention
		{Status: job.StatusUnknown},
	}
	got, err := x.Count(t.Context(), job.CountQuery{Queries: queries})
	if err != nil {
		t.Fatal(err)
	}
	if want := "[3 2 1 1 1 1 3 0]"; fmt.Sprint(got.Counts) != want {
		t.Errorf("Count = %v, want %s", got.Counts, want)
	}
	for i, q := range queries {
		q.Count = true
		if l, err := x.List(t.Context(), q); err != nil || *l.Count != got.Counts[i] {
			t.Errorf("List(%+v).Count = %v (%v), want Count's %d", q, l.Count, err, got.Counts[i])
		}
	}
	if _, err := x.Count(t.Context(), job.CountQuery{Queries: []job.ListQuery{{Queue: "a.b"}}}); !errors.Is(err, job.ErrInvalidQuery) {
		t.Errorf("Count with a bad queue = %v, want ErrInvalidQuery", err)
	}
}

type natsReply struct {
	data []byte
	code string
}

// request asks once; nil when nobody answers yet.
func request(t *testing.T, nc *nats.Conn, subject string, q any) *natsReply {
	t.Helper()
	b, _ := json.Marshal(q)
	m, err := nc.Request(subject, b, 5*time.Second)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return &natsReply{data: m.Data, code: m.Header.Get("Nats-Service-Error-Code")}
}

// TestUntilWithinItsMillisecond: a job settled before Until in Until's own millisecond is
// listed and counted (Until is exclusive, scores are whole milliseconds): a redrive whose Until
// was its own start missed the last job settled in that millisecond.
func TestUntilWithinItsMillisecond(t *testing.T) {
	t.Parallel()
	x := newIndex(t, jobindex.Options{})
	ms := time.Now().Truncate(time.Millisecond)
	if err := x.Add(t.Context(), row("early", job.StatusFailed, "default", "default", ms.Add(100*time.Microsecond))); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		until time.Time
		want  int64
	}{
		{ms.Add(500 * time.Microsecond), 1},
		{ms.Add(time.Millisecond), 1},
		{ms, 0},
	} {
		l, err := x.List(t.Context(), job.ListQuery{Until: tc.until, Count: true})
		if err != nil {
			t.Fatal(err)
		}
		if *l.Count != tc.want || int64(len(l.Jobs)) != tc.want {
			t.Errorf("until %v past the row's millisecond: count %d, %d rows, want %d", tc.until.Sub(ms), *l.Count, len(l.Jobs), tc.want)
		}
	}
}
