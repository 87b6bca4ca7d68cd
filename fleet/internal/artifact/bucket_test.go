package artifact_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/fleet/internal/artifact"
	"github.com/runfleet/runfleet/protocol"
)

// A bucket at its bound refuses the put that would pass it: the collection keeps what was
// stored, says truncated, and leaves no chunk of the refused put behind.
func TestCollectBucketFull(t *testing.T) {
	n, store, s := newBucketWith(t, protocol.StreamOptions{ArtifactsMaxBytes: 256 << 10})
	ws := newWorkspace(t, map[string][]byte{"a.bin": bytes.Repeat([]byte("a"), 100<<10), "b.bin": bytes.Repeat([]byte("b"), 400<<10)})
	res, err := artifact.Collect(t.Context(), ws, store, artifact.Job{Tenant: "t", ID: "full", Attempt: 1, Outputs: []string{"*.bin"},
		MaxBytes: 1 << 20, MaxFiles: 8, Valid: always})
	if err == nil || !res.Truncated || len(res.Artifacts) != 1 || res.Artifacts[0].Path != "a.bin" {
		t.Fatalf("Collect() = %+v, %v; want a.bin only, truncated, an error", res, err)
	}
	if b, err := store.GetBytes(t.Context(), res.Artifacts[0].Object); err != nil || len(b) != 100<<10 {
		t.Errorf("GetBytes(a.bin) = %d bytes, %v; want %d", len(b), err, 100<<10)
	}
	if got := len(chunkSubjects(t, n, s)); got != 2 {
		t.Errorf("chunk subjects = %d, want 2 (the manifest's and a.bin's)", got)
	}
}

// A bucket a client made has no bound until a worker starts: the worker's bound applies to it,
// and a later start that sets none keeps it. A server without room for a bound says so.
func TestArtifactsBound(t *testing.T) {
	n, _, s := newBucket(t)
	js, err := jetstream.New(n.Conn())
	if err != nil {
		t.Fatal(err)
	}
	bound := func() int64 {
		st, err := js.Stream(t.Context(), "OBJ_"+s.ArtifactsBucket())
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().Config.MaxBytes
	}
	if got := bound(); got != -1 {
		t.Errorf("client-made bucket's MaxBytes = %d, want -1", got)
	}
	if err := protocol.EnsureStreams(t.Context(), js, s, protocol.StreamOptions{ArtifactsMaxBytes: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if got := bound(); got != 1<<20 {
		t.Errorf("existing bucket's MaxBytes = %d, want %d", got, 1<<20)
	}
	if err := protocol.EnsureStreams(t.Context(), js, s, protocol.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := bound(); got != 1<<20 {
		t.Errorf("MaxBytes = %d after a start that sets none, want %d kept", got, 1<<20)
	}
	err = protocol.EnsureStreams(t.Context(), js, s, protocol.StreamOptions{ArtifactsMaxBytes: 1 << 60})
	if err == nil || !strings.Contains(err.Error(), "more JetStream storage") {
		t.Errorf("EnsureStreams(1 EiB) error = %v, want one that says the servers lack room", err)
	}
}
