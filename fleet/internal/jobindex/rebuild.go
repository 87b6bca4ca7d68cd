package jobindex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/job"
)

// Placer says on which queue tenant's job id was published (its stored request's subject). It
// returns an error matching ErrUnplaced when the request is no longer kept.
type Placer func(ctx context.Context, tenant, id string) (queue string, err error)

// ErrUnplaced: a settlement whose job's request is no longer kept; its row cannot be rebuilt.
var ErrUnplaced = errors.New("the job's request is no longer kept")

// Rebuilt counts what a rebuild read and wrote.
type Rebuilt struct {
	Settlements int // read from the results stream
	Rows        int // added to the index (again, for those it held)
	Unplaced    int // skipped: their requests are no longer kept
	Expired     int // skipped: settled before the retention
}

// rebuildBatch is how many rows a rebuild adds in one round trip.
const rebuildBatch = 256

// Rebuild adds the row of every settlement the results stream keeps, oldest first, as the runner
// adds them: rows the index holds stay as they are, rows it lost (a Redis that failed over
// before it replicated them, or lost its data) come back. It reads the stream once with one
// ordered consumer, and places each job with one read of its request. Workers may run meanwhile:
// a row added twice changes nothing.
func (x *Index) Rebuild(ctx context.Context, js jetstream.JetStream, subjects job.Subjects, place Placer) (Rebuilt, error) {
	var r Rebuilt
	cons, err := js.OrderedConsumer(ctx, subjects.ResultsStream(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subjects.AllSettled()},
	})
	if err != nil {
		return r, fmt.Errorf("read settlements: %w", err)
	}
	oldest := time.Now().Add(-x.retention)
	var rows []job.Listed
	flush := func() error {
		if len(rows) == 0 {
			return nil
		}
		if err := x.Add(ctx, rows...); err != nil {
			return err
		}
		r.Rows += len(rows)
		rows = rows[:0]
		return nil
	}
	for {
		batch, err := cons.Fetch(rebuildBatch, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return r, fmt.Errorf("read settlements: %w", err)
		}
		got, pending := 0, uint64(0)
		for m := range batch.Messages() {
			got++
			if meta, err := m.Metadata(); err == nil {
				pending = meta.NumPending
			}
			r.Settlements++
			var st job.Settlement
			t, id, _, ok := subjects.ParseResult(m.Subject())
			if err := json.Unmarshal(m.Data(), &st); err != nil || !ok || st.JobID != id {
				continue // not a settlement the fleet wrote: nothing to list
			}
			if st.SettledAt.Before(oldest) {
				r.Expired++
				continue
			}
			q, err := place(ctx, t, st.JobID)
			if errors.Is(err, ErrUnplaced) {
				r.Unplaced++
				continue
			}
			if err != nil {
				return r, fmt.Errorf("place job %s: %w", st.JobID, err)
			}
			rows = append(rows, job.ListedOf(q, t, st))
			if len(rows) == rebuildBatch {
				if err := flush(); err != nil {
					return r, err
				}
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return r, fmt.Errorf("read settlements: %w", err)
		}
		if got == 0 || pending == 0 {
			return r, flush()
		}
	}
}
