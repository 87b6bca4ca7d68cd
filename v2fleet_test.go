package runfleet_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// v2Fleet is the streams of one fleet of protocol version 2 on the examples' server, under a
// prefix of its own that no worker serves: the test stores jobs and results as a worker would.
type v2Fleet struct {
	c  *runfleet.Client
	nc *nats.Conn
	js jetstream.JetStream
	s  job.Subjects
}

var v2Fleets atomic.Int64

// newV2Fleet creates the streams of a new prefix: the jobs stream as docs/protocol.md's version
// 2 lays it out (one message per job subject, kept), the others as EnsureStreams makes them.
func newV2Fleet(t testing.TB, o protocol.StreamOptions) *v2Fleet {
	t.Helper()
	nc := dial(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := job.NewSubjects(fmt.Sprintf("v2w%d-%d", time.Now().UnixNano()%1e9, v2Fleets.Add(1)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:                 s.JobsStream(),
		Subjects:             []string{s.AllJobs()},
		Retention:            jetstream.LimitsPolicy,
		MaxMsgsPerSubject:    1,
		Discard:              jetstream.DiscardNew,
		DiscardNewPerSubject: true,
		MaxAge:               time.Hour,
		AllowDirect:          true,
		Storage:              jetstream.FileStorage,
	}); err != nil {
		t.Fatal(err)
	}
	if err := protocol.EnsureStreams(ctx, js, s, o); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, name := range []string{s.JobsStream(), s.ResultsStream(), s.ControlStream()} {
			_ = js.DeleteStream(ctx, name)
		}
		_ = js.DeleteObjectStore(ctx, s.ArtifactsBucket())
	})
	c, err := runfleet.NewClient(ctx, nc, runfleet.Options{Prefix: s.Prefix()})
	if err != nil {
		t.Fatal(err)
	}
	return &v2Fleet{c: c, nc: nc, js: js, s: s}
}

// submit stores a job's request on its version-2 subject.
func (f *v2Fleet) submit(t testing.TB, queue, tenant, id string) uint64 {
	t.Helper()
	m := nats.NewMsg(f.s.Job(queue, tenant, id))
	m.Header.Set(job.HeaderMsgID, id)
	m.Data = []byte(`{"id":"` + id + `","language":"python3","code":"print(1)"}`)
	ack, err := f.js.PublishMsg(t.Context(), m)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// writer stores one attempt's results as internal/queue's Chain does: each write expects the
// sequence of the job's last stored result, so a writer that is behind is refused.
type writer struct {
	f       *v2Fleet
	id      string
	attempt int
	last    uint64
	ttl     time.Duration // a page's Nats-TTL, none when zero
}

func (w *writer) publish(ctx context.Context, m *nats.Msg) error {
	m.Header.Set(job.HeaderJobID, w.id)
	m.Header.Set(job.HeaderAttempt, strconv.Itoa(w.attempt))
	ack, err := w.f.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequenceForSubject(w.last, w.f.s.Results("default", w.id)))
	if err != nil {
		return err
	}
	w.last = ack.Sequence
	return nil
}

func (w *writer) page(ctx context.Context, index int, data string) error {
	m := nats.NewMsg(w.f.s.Page("default", w.id))
	m.Data = []byte(data)
	m.Header.Set(job.HeaderStream, job.Stdout)
	m.Header.Set(job.HeaderPage, strconv.Itoa(index))
	m.Header.Set(job.HeaderOffset, "0")
	if w.ttl > 0 {
		m.Header.Set(jetstream.MsgTTLHeader, w.ttl.String())
	}
	return w.publish(ctx, m)
}

func (w *writer) settle(ctx context.Context, pages int) error {
	m := nats.NewMsg(w.f.s.Settled("default", w.id))
	m.Data = fmt.Appendf(nil, `{"job_id":%q,"status":"succeeded","pages":%d}`, w.id, pages)
	return w.publish(ctx, m)
}

// consumers is the number of consumers the results stream holds.
func (f *v2Fleet) consumers(t testing.TB) int {
	t.Helper()
	s, err := f.js.Stream(t.Context(), f.s.ResultsStream())
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().State.Consumers
}

// TestEnsureStreamsFromVersion2: the streams of a version-2 fleet are brought to version 3 by
// EnsureStreams — the jobs stream's duplicate window down to 100 ms (a header one tenant sets
// must not drop another's publish for 2 minutes), the version-3 republish of results and the
// subjects of dispatch markers and cancels that name the tenant — and keep what they had.
func TestEnsureStreamsFromVersion2(t *testing.T) {
	nc := dial(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := job.NewSubjects(fmt.Sprintf("v2u%d-%d", time.Now().UnixNano()%1e9, v2Fleets.Add(1)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	p := s.Prefix()
	for _, cfg := range []jetstream.StreamConfig{
		{Name: s.JobsStream(), Subjects: []string{p + ".jobs.*.*.*"}, MaxMsgsPerSubject: 1, Discard: jetstream.DiscardNew,
			DiscardNewPerSubject: true, MaxAge: time.Hour, Duplicates: 2 * time.Minute, AllowDirect: true},
		{Name: s.ResultsStream(), Subjects: []string{p + ".results.>", p + ".rejected", p + ".dispatched.*"}, AllowDirect: true,
			AllowMsgTTL: true, RePublish: &jetstream.RePublish{Source: p + ".results.*.*", Destination: p + ".watch.{{wildcard(1)}}.{{wildcard(2)}}"}},
		{Name: s.ControlStream(), Subjects: []string{p + ".cancel.*"}},
	} {
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, name := range []string{s.JobsStream(), s.ResultsStream(), s.ControlStream()} {
			_ = js.DeleteStream(ctx, name)
		}
		_ = js.DeleteObjectStore(ctx, s.ArtifactsBucket())
		_ = js.DeleteKeyValue(ctx, s.ConsumersBucket())
	})
	if err := protocol.EnsureStreams(ctx, js, s, protocol.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	config := func(name string) jetstream.StreamConfig {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().Config
	}
	if got := config(s.JobsStream()).Duplicates; got != protocol.JobsDuplicates {
		t.Errorf("jobs stream's duplicate window = %v, want %v", got, protocol.JobsDuplicates)
	}
	results := config(s.ResultsStream())
	if rp := results.RePublish; rp == nil || rp.Source != p+".results.*.*.*" || rp.Destination != p+".watch.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}" {
		t.Errorf("results republish = %+v, want version 3's", rp)
	}
	if !slices.Contains(results.Subjects, s.AllDispatched()) || !slices.Contains(results.Subjects, s.AllDispatchedV2()) {
		t.Errorf("results subjects = %v, want the version-3 markers beside the version-2 ones", results.Subjects)
	}
	if got := config(s.ControlStream()).Subjects; !slices.Contains(got, s.AllCancels()) || !slices.Contains(got, p+".cancel.*") {
		t.Errorf("control subjects = %v, want the version-3 cancels beside the version-2 ones", got)
	}
}
