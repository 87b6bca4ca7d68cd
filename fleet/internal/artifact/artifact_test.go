package artifact_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/runfleet/runfleet/fleet/internal/artifact"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// workspace is a directory read as a sandbox's /workspace, by the walker the providers use.
type workspace string

func (w workspace) ReadFiles(ctx context.Context, match func(string) bool, fn func(string, int64, io.Reader) error) error {
	return sandbox.WalkFiles(ctx, string(w), match, fn)
}

func newWorkspace(t testing.TB, files map[string][]byte) workspace {
	t.Helper()
	dir := t.TempDir()
	for p, b := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return workspace(dir)
}

// newBucket makes the fleet's streams and bucket on a real JetStream, as a worker does.
func newBucket(t testing.TB) (*testenv.NATS, jetstream.ObjectStore, job.Subjects) {
	t.Helper()
	return newBucketWith(t, protocol.StreamOptions{})
}

func newBucketWith(t testing.TB, so protocol.StreamOptions) (*testenv.NATS, jetstream.ObjectStore, job.Subjects) {
	t.Helper()
	n := testenv.StartNATS(t)
	js, err := jetstream.New(n.Conn())
	if err != nil {
		t.Fatal(err)
	}
	s, _ := job.NewSubjects("")
	if err := protocol.EnsureStreams(t.Context(), js, s, so); err != nil {
		t.Fatal(err)
	}
	store, err := js.ObjectStore(t.Context(), s.ArtifactsBucket())
	if err != nil {
		t.Fatal(err)
	}
	return n, store, s
}

func always() bool { return true }

// A takeover that settles unknown lists nothing and sweeps what the stale attempt stored; the
// settling attempt then forgets the manifests, and the bucket holds nothing of the job.
func TestSweepAfterTakeover(t *testing.T) {
	_, store, _ := newBucket(t)
	ws := newWorkspace(t, map[string][]byte{"out/a.png": []byte("a"), "out/b.png": []byte("bb")})
	res, err := artifact.Collect(t.Context(), ws, store, artifact.Job{Tenant: "t", ID: "j1", Attempt: 1, Outputs: []string{"out/*"},
		MaxBytes: 1 << 20, MaxFiles: 8, Valid: always})
	if err != nil || len(res.Artifacts) != 2 {
		t.Fatalf("Collect() = %+v, %v; want 2 artifacts", res, err)
	}
	// Another job's objects are not the sweep's business.
	if _, err := artifact.Collect(t.Context(), ws, store, artifact.Job{Tenant: "t", ID: "j2", Attempt: 1, Outputs: []string{"out/a.png"},
		MaxBytes: 1 << 20, MaxFiles: 8, Valid: always}); err != nil {
		t.Fatal(err)
	}
	if err := artifact.Sweep(t.Context(), store, "t", "j1", 2, nil); err != nil {
		t.Fatalf("Sweep() error = %v", err)
	}
	if err := artifact.Forget(t.Context(), store, "t", "j1", 2); err != nil {
		t.Fatalf("Forget() error = %v", err)
	}
	if got, want := testenv.ObjectNames(t, store), []string{"t/j2/1", "t/j2/1/out/a.png"}; !slices.Equal(got, want) {
		t.Errorf("objects = %q, want %q", got, want)
	}
}

// A normal settle keeps what it lists and sweeps what it put but does not list.
func TestSweepKeepsListed(t *testing.T) {
	_, store, _ := newBucket(t)
	ws := newWorkspace(t, map[string][]byte{"a.csv": []byte("1"), "b.csv": []byte("2")})
	res, err := artifact.Collect(t.Context(), ws, store, artifact.Job{Tenant: "t", ID: "j", Attempt: 3, Outputs: []string{"*.csv"},
		MaxBytes: 1 << 20, MaxFiles: 8, Valid: always})
	if err != nil {
		t.Fatal(err)
	}
	keep := res.Artifacts[:1]
	if err := artifact.Sweep(t.Context(), store, "t", "j", 3, keep); err != nil {
		t.Fatal(err)
	}
	if got, want := testenv.ObjectNames(t, store), []string{"t/j/3", "t/j/3/a.csv"}; !slices.Equal(got, want) {
		t.Errorf("objects = %q, want %q (the manifest stays until Forget)", got, want)
	}
}

// No put happens once the lease is invalid; what was stored before is returned, truncated.
func TestCollectStopsWhenLeaseLost(t *testing.T) {
	_, store, _ := newBucket(t)
	ws := newWorkspace(t, map[string][]byte{"1.txt": []byte("1"), "2.txt": []byte("2"), "3.txt": []byte("3")})
	puts := 0
	res, err := artifact.Collect(t.Context(), ws, store, artifact.Job{Tenant: "t", ID: "j", Attempt: 1, Outputs: []string{"*"},
		MaxBytes: 1 << 20, MaxFiles: 8, Valid: func() bool { puts++; return puts < 3 }}) // the manifest, then one file
	if !errors.Is(err, artifact.ErrLeaseLost) || len(res.Artifacts) != 1 || !res.Truncated {
		t.Errorf("Collect() = %+v, %v; want 1 artifact, truncated, ErrLeaseLost", res, err)
	}
	if got, want := testenv.ObjectNames(t, store), []string{"t/j/1", "t/j/1/1.txt"}; !slices.Equal(got, want) {
		t.Errorf("objects = %q, want %q", got, want)
	}
}

// Bounds: the first file past artifact_files or artifact_bytes ends the collection.
func TestCollectBounds(t *testing.T) {
	_, store, _ := newBucket(t)
	ws := newWorkspace(t, map[string][]byte{"a": make([]byte, 10), "b": make([]byte, 10), "c": make([]byte, 1)})
	for _, c := range []struct {
		name            string
		maxBytes, files int64
		want            []string
		truncated       bool
	}{
		{"all fit", 21, 3, []string{"a", "b", "c"}, false},
		{"files", 100, 2, []string{"a", "b"}, true},
		{"bytes", 15, 3, []string{"a"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, err := artifact.Collect(t.Context(), ws, store, artifact.Job{Tenant: "t", ID: "bounds", Attempt: 1, Outputs: []string{"*"},
				MaxBytes: c.maxBytes, MaxFiles: c.files, Valid: always})
			var got []string
			for _, a := range res.Artifacts {
				got = append(got, a.Path)
			}
			if err != nil || !slices.Equal(got, c.want) || res.Truncated != c.truncated {
				t.Errorf("Collect() = %q truncated %v, %v; want %q truncated %v", got, res.Truncated, err, c.want, c.truncated)
			}
		})
	}
}

// Any NATS client reads an artifact with its object store API: here the official nats CLI.
func TestNatsCLIReadsArtifact(t *testing.T) {
	cli, err := exec.LookPath("nats")
	if err != nil {
		testenv.Missing(t, "the nats CLI (go install github.com/nats-io/natscli/nats@v0.5.0; scripts/setup test installs it)")
	}
	n, store, s := newBucket(t)
	content := bytes.Repeat([]byte("plot\x00\xff\n"), 100_000)
	ws := newWorkspace(t, map[string][]byte{"out/plot.png": content})
	res, err := artifact.Collect(t.Context(), ws, store, artifact.Job{Tenant: "t", ID: "cli-job", Attempt: 1, Outputs: []string{"out/*.png"},
		MaxBytes: 16 << 20, MaxFiles: 4, Valid: always})
	if err != nil || len(res.Artifacts) != 1 {
		t.Fatalf("Collect() = %+v, %v", res, err)
	}
	out := filepath.Join(t.TempDir(), "got.png")
	cmd := exec.CommandContext(t.Context(), cli, "--server", n.URL, "object", "get", s.ArtifactsBucket(), res.Artifacts[0].Object, "--output", out, "--force")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nats object get: %v\n%s", err, b)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(got)
	if !bytes.Equal(got, content) || hex.EncodeToString(sum[:]) != res.Artifacts[0].SHA256 {
		t.Errorf("nats object get wrote %d bytes (sha256 %x), want %d bytes, sha256 %s", len(got), sum, len(content), res.Artifacts[0].SHA256)
	}
}

// BenchmarkCollect is the cost of collecting and storing 10 MiB in 20 files, against a baseline
// of the same bytes put into the same bucket as 20 plain objects: compare ns/op of the two.
func BenchmarkCollect(b *testing.B) {
	_, store, _ := newBucket(b)
	files := map[string][]byte{}
	for i := range 20 {
		files[fmt.Sprintf("out/f%02d.bin", i)] = bytes.Repeat([]byte{byte(i)}, 10<<20/20)
	}
	ws := newWorkspace(b, files)
	b.Run("baseline_put", func(b *testing.B) {
		b.SetBytes(10 << 20)
		for i := 0; b.Loop(); i++ {
			for p, data := range files {
				if _, err := store.PutBytes(b.Context(), fmt.Sprintf("base/%d/%s", i, p), data); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("collect", func(b *testing.B) {
		b.SetBytes(10 << 20)
		for i := 0; b.Loop(); i++ {
			res, err := artifact.Collect(b.Context(), ws, store, artifact.Job{Tenant: "t", ID: "bench", Attempt: int64(i + 1), Outputs: []string{"out/**"},
				MaxBytes: 16 << 20, MaxFiles: 32, Valid: always})
			if err != nil || len(res.Artifacts) != 20 {
				b.Fatalf("Collect() = %d artifacts, %v", len(res.Artifacts), err)
			}
		}
	})
}

// timeoutOnce is the real bucket, whose puts of one name time out the first time, as an ack
// does on a loaded server.
type timeoutOnce struct {
	jetstream.ObjectStore
	name string
	done bool
}

func (s *timeoutOnce) Put(ctx context.Context, meta jetstream.ObjectMeta, r io.Reader) (*jetstream.ObjectInfo, error) {
	if meta.Name == s.name && !s.done {
		s.done = true
		_, _ = io.Copy(io.Discard, r)
		return nil, nats.ErrTimeout
	}
	return s.ObjectStore.Put(ctx, meta, r)
}

// TestCollectRetriesAPassingFault: a put that timed out is tried again from a second read of its
// file, and the artifacts come complete, in path order.
func TestCollectRetriesAPassingFault(t *testing.T) {
	_, bucket, _ := newBucket(t)
	ws := newWorkspace(t, map[string][]byte{"out/a.txt": []byte("a"), "out/b.txt": []byte("bb"), "out/c.txt": []byte("ccc")})
	store := &timeoutOnce{ObjectStore: bucket, name: job.ArtifactObject("t", "j", 1, "out/b.txt")}
	res, err := artifact.Collect(t.Context(), ws, store, artifact.Job{Tenant: "t", ID: "j", Attempt: 1, Outputs: []string{"out/*"},
		MaxFiles: 10, MaxBytes: 1 << 20, Valid: always})
	if err != nil || res.Truncated || len(res.Artifacts) != 3 {
		t.Fatalf("Collect() = %+v, %v; want 3 artifacts, not truncated", res, err)
	}
	for i, want := range []string{"out/a.txt", "out/b.txt", "out/c.txt"} {
		if res.Artifacts[i].Path != want {
			t.Errorf("artifact %d = %s, want %s", i, res.Artifacts[i].Path, want)
		}
	}
	if !store.done {
		t.Error("the put never timed out: the test proves nothing")
	}
}
