package artifact_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/fleet/internal/artifact"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// chunkSubjects returns the nuids that hold chunks in the artifacts bucket.
func chunkSubjects(t testing.TB, n *testenv.NATS, s job.Subjects) []string {
	t.Helper()
	return slices.Sorted(maps.Keys(chunkCounts(t, n, s)))
}

// chunkCounts returns how many chunks each nuid of the artifacts bucket holds.
func chunkCounts(t testing.TB, n *testenv.NATS, s job.Subjects) map[string]uint64 {
	t.Helper()
	js, err := jetstream.New(n.Conn())
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(t.Context(), "OBJ_"+s.ArtifactsBucket())
	if err != nil {
		t.Fatal(err)
	}
	prefix := "$O." + s.ArtifactsBucket() + ".C."
	info, err := st.Info(t.Context(), jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for subj, n := range info.State.Subjects {
		counts[strings.TrimPrefix(subj, prefix)] = n
	}
	return counts
}

// stallingReader gives n bytes, then blocks until ctx ends: a put whose worker was cut off half
// way.
type stallingReader struct {
	ctx  context.Context
	left int
}

func (r *stallingReader) Read(p []byte) (int, error) {
	if r.left <= 0 {
		<-r.ctx.Done()
		return 0, r.ctx.Err()
	}
	n := min(len(p), r.left)
	r.left -= n
	return n, nil
}

// Chunks no metadata names are what a put cut off leaves: PurgeOrphans removes those older than
// its cutoff and keeps every object's and the younger ones (a put may still be writing them).
func TestPurgeOrphans(t *testing.T) {
	n, store, s := newBucket(t)
	js, err := jetstream.New(n.Conn())
	if err != nil {
		t.Fatal(err)
	}
	bucket := s.ArtifactsBucket()
	kept, err := store.PutBytes(t.Context(), "j/1/kept.txt", bytes.Repeat([]byte("k"), 300<<10))
	if err != nil {
		t.Fatal(err)
	}
	// A put cut off by its context: nats.go's own clean-up runs on the ended context and fails.
	ctx, cancel := context.WithCancel(t.Context())
	r := &stallingReader{ctx: ctx, left: 300 << 10}
	done := make(chan error, 1)
	go func() {
		_, err := store.Put(ctx, jetstream.ObjectMeta{Name: "j/2/cut.txt"}, r)
		done <- err
	}()
	// 300 KiB is three chunks of 128 KiB.
	testenv.WaitFor(t, 30*time.Second, "the cut put's three chunks stored", func() bool {
		counts := chunkCounts(t, n, s)
		delete(counts, kept.NUID)
		return len(counts) == 1 && slices.Collect(maps.Values(counts))[0] == 3
	})
	cancel()
	if err := <-done; err == nil {
		t.Fatal("Put() = nil error after its context ended")
	}
	// Chunks published with no metadata at all, as by a worker killed mid-put.
	if _, err := js.Publish(t.Context(), "$O."+bucket+".C.killedMidPut0000000001", []byte("chunk")); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(t.Context(), "OBJ_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	last, err := st.GetLastMsgForSubject(t.Context(), "$O."+bucket+".C.killedMidPut0000000001")
	if err != nil {
		t.Fatal(err)
	}
	cutoff := last.Time.Add(time.Nanosecond)
	testenv.WaitFor(t, 10*time.Second, "the clock past the cutoff", func() bool { return time.Now().After(cutoff) })
	if _, err := js.Publish(t.Context(), "$O."+bucket+".C.stillWriting00000000002", []byte("chunk")); err != nil {
		t.Fatal(err)
	}
	if got := len(chunkSubjects(t, n, s)); got != 4 {
		t.Fatalf("chunk subjects = %d before the purge, want 4", got)
	}

	purged, err := artifact.PurgeOrphans(t.Context(), js, bucket, cutoff)
	if err != nil || purged != 2 {
		t.Errorf("PurgeOrphans() = %d, %v; want 2", purged, err)
	}
	want := []string{kept.NUID, "stillWriting00000000002"}
	slices.Sort(want)
	if got := chunkSubjects(t, n, s); !slices.Equal(got, want) {
		t.Errorf("chunk subjects = %q, want %q", got, want)
	}
	b, err := store.GetBytes(t.Context(), "j/1/kept.txt")
	if err != nil || len(b) != 300<<10 {
		t.Errorf("GetBytes(kept) = %d bytes, %v; want %d", len(b), err, 300<<10)
	}
	if _, err := store.GetBytes(t.Context(), "j/2/cut.txt"); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Errorf("GetBytes(cut) error = %v, want ErrObjectNotFound", err)
	}
}

// An empty bucket and one whose objects were all deleted have nothing to purge.
func TestPurgeOrphansNothing(t *testing.T) {
	n, store, s := newBucket(t)
	js, err := jetstream.New(n.Conn())
	if err != nil {
		t.Fatal(err)
	}
	if purged, err := artifact.PurgeOrphans(t.Context(), js, s.ArtifactsBucket(), time.Now().Add(time.Hour)); err != nil || purged != 0 {
		t.Errorf("PurgeOrphans(empty) = %d, %v; want 0, nil", purged, err)
	}
	if _, err := store.Put(t.Context(), jetstream.ObjectMeta{Name: "x"}, io.LimitReader(zeros{}, 1000)); err != nil {
		t.Fatal(err)
	}
	if err := store.Delete(t.Context(), "x"); err != nil {
		t.Fatal(err)
	}
	if purged, err := artifact.PurgeOrphans(t.Context(), js, s.ArtifactsBucket(), time.Now().Add(time.Hour)); err != nil || purged != 0 {
		t.Errorf("PurgeOrphans(deleted) = %d, %v; want 0, nil", purged, err)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }
