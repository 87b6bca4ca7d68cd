package jobindex_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/fleet/internal/jobindex"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// TestRebuild: an index that lost its rows (here: all, as a Redis that lost its data) gets them
// back from the settlements the results stream keeps, the same rows the runner adds; a job whose
// request is no longer kept is counted and skipped; rebuilding again changes nothing.
func TestRebuild(t *testing.T) {
	t.Parallel()
	n := testenv.StartNATS(t)
	js, err := jetstream.New(n.Conn())
	if err != nil {
		t.Fatal(err)
	}
	subjects, _ := job.NewSubjects("")
	if err := protocol.EnsureStreams(t.Context(), js, subjects, protocol.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	r := testenv.StartRedis(t)
	x := jobindex.New(r.Client(), jobindex.Options{})

	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond).UTC()
	placed := map[string][2]string{}
	var want []job.Listed
	for i := range 600 {
		id := job.NewID()
		st := job.Settlement{JobID: id, Status: []job.Status{job.StatusSucceeded, job.StatusFailed, job.StatusUnknown}[i%3],
			Attempt: 1, Worker: "w", SettledAt: base.Add(time.Duration(i) * time.Millisecond)}
		q, tenant := []string{"default", "batch"}[i%2], fmt.Sprintf("t%d", i%5)
		body, _ := json.Marshal(st)
		if _, err := js.Publish(t.Context(), subjects.Settled(tenant, id), body); err != nil {
			t.Fatal(err)
		}
		if i == 7 {
			continue // its request expired
		}
		placed[id] = [2]string{q, tenant}
		want = append(want, job.ListedOf(q, tenant, st))
	}
	place := func(_ context.Context, tenant, id string) (string, error) {
		p, ok := placed[id]
		if !ok || p[1] != tenant {
			return "", jobindex.ErrUnplaced
		}
		return p[0], nil
	}
	for round := range 2 {
		got, err := x.Rebuild(t.Context(), js, subjects, place)
		if err != nil || got != (jobindex.Rebuilt{Settlements: 600, Rows: 599, Unplaced: 1}) {
			t.Fatalf("Rebuild() round %d = %+v, %v; want 600 read, 599 rows, 1 unplaced", round+1, got, err)
		}
		for _, q := range []job.ListQuery{{}, {Status: job.StatusFailed}, {Queue: "batch", Tenant: "t3"}} {
			var wantIDs []string
			for _, l := range slices.Backward(want) {
				if (q.Status == "" || l.Status == q.Status) && (q.Queue == "" || l.Queue == q.Queue) && (q.Tenant == "" || l.Tenant == q.Tenant) {
					wantIDs = append(wantIDs, l.JobID)
				}
			}
			q.Limit = 1000
			if ids := listAll(t, x, q); !slices.Equal(ids, wantIDs) {
				t.Errorf("round %d: List(%+v) after the rebuild = %d rows, want %d", round+1, q, len(ids), len(wantIDs))
			}
		}
	}
	l, err := x.List(t.Context(), job.ListQuery{Limit: 1})
	if err != nil || len(l.Jobs) != 1 || l.Jobs[0] != want[len(want)-1] {
		t.Errorf("newest row = %+v, %v; want %+v, as the runner writes it", l.Jobs, err, want[len(want)-1])
	}
}
