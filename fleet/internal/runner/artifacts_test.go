package runner_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// artifactsCode leaves matched files, an unmatched one, links out of /workspace and a directory.
const artifactsCode = `import os
os.makedirs('out/deep/er', exist_ok=True)
open('out/a.csv', 'w').write('x,y\n1,2\n')
open('out/deep/er/b.bin', 'wb').write(bytes(range(256)) * 1000)
open('report.csv', 'w').write('r')
open('notes.txt', 'w').write('not matched')
os.symlink('/etc/passwd', 'out/passwd')
os.symlink('/etc', 'out/etc')
os.makedirs('out/dir.csv')
`

// TestArtifacts runs jobs that keep files on both providers.
func TestArtifacts(t *testing.T) {
	for _, provider := range []string{"namespace", "docker"} {
		t.Run(provider, func(t *testing.T) { testArtifacts(t, provider == "docker") })
	}
}

func testArtifacts(t *testing.T, useDocker bool) {
	f := newFleet(t)
	f.startWorker(workerOpts{docker: useDocker})
	store, err := f.js.ObjectStore(t.Context(), f.subjects.ArtifactsBucket())
	if err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, st job.Settlement, wantPaths []string) {
		t.Helper()
		var paths []string
		for _, a := range st.Artifacts {
			paths = append(paths, a.Path)
			b, err := store.GetBytes(t.Context(), a.Object)
			if err != nil {
				t.Errorf("GetBytes(%s) error = %v", a.Object, err)
				continue
			}
			sum := sha256.Sum256(b)
			if int64(len(b)) != a.Size || hex.EncodeToString(sum[:]) != a.SHA256 || a.Object != job.ArtifactObject("default", st.JobID, st.Attempt, a.Path) {
				t.Errorf("artifact %+v: stored %d bytes, sha256 %x", a, len(b), sum)
			}
		}
		if !slices.Equal(paths, wantPaths) {
			t.Errorf("artifacts = %q, want %q", paths, wantPaths)
		}
		// Nothing but what the settlement lists stays in the bucket: the attempt's manifest, which
		// names what it stores in case a takeover must sweep, goes once the settlement is stored.
		testenv.WaitFor(t, 30*time.Second, "the bucket holding only what settlement "+st.JobID+" lists", func() bool {
			return !slices.ContainsFunc(testenv.ObjectNames(t, store), func(name string) bool {
				return strings.HasPrefix(name, st.JobID+"/") && !slices.ContainsFunc(st.Artifacts, func(a job.Artifact) bool { return a.Object == name })
			})
		})
	}
	t.Run("matched regular files only", func(t *testing.T) {
		r := f.run(job.Request{Language: "python3", Code: artifactsCode, Outputs: []string{"out/**", "*.csv"}})
		if r.st.Status != job.StatusSucceeded || r.st.ArtifactsTruncated {
			t.Fatalf("settlement = %+v (stderr %q), want succeeded, not truncated", r.st, r.stderr)
		}
		check(t, r.st, []string{"out/a.csv", "out/deep/er/b.bin", "report.csv"})
		if want := int64(256 * 1000); r.st.Artifacts[1].Size != want {
			t.Errorf("b.bin size = %d, want %d", r.st.Artifacts[1].Size, want)
		}
	})
	t.Run("bounds truncate", func(t *testing.T) {
		r := f.run(job.Request{Language: "python3", Code: artifactsCode, Outputs: []string{"**"},
			Limits: job.Limits{ArtifactFiles: 2}})
		if !r.st.ArtifactsTruncated {
			t.Errorf("ArtifactsTruncated = false, want true")
		}
		check(t, r.st, []string{"notes.txt", "out/a.csv"})
		r = f.run(job.Request{Language: "python3", Code: artifactsCode, Outputs: []string{"**"},
			Limits: job.Limits{ArtifactBytes: 100}})
		if !r.st.ArtifactsTruncated {
			t.Errorf("ArtifactsTruncated = false, want true")
		}
		check(t, r.st, []string{"notes.txt", "out/a.csv"})
	})
	t.Run("kept after timeout and failure", func(t *testing.T) {
		r := f.run(job.Request{Language: "python3", Outputs: []string{"partial.txt"},
			Code:   "open('partial.txt', 'w').write('half')\nimport time\ntime.sleep(60)",
			Limits: job.Limits{Timeout: 2 * time.Second}})
		if r.st.Status != job.StatusTimedOut {
			t.Errorf("status = %s, want timed_out", r.st.Status)
		}
		check(t, r.st, []string{"partial.txt"})
		r = f.run(job.Request{Language: "python3", Outputs: []string{"partial.txt"},
			Code: "open('partial.txt', 'w').write('half')\nraise SystemExit(3)"})
		if r.st.Status != job.StatusFailed {
			t.Errorf("status = %s, want failed", r.st.Status)
		}
		check(t, r.st, []string{"partial.txt"})
	})
	t.Run("names not UTF-8 skipped", func(t *testing.T) {
		r := f.run(job.Request{Language: "python3", Outputs: []string{"out/*"},
			Code: "import os\nos.makedirs('out')\nopen(b'out/bad\\xff.txt', 'w').write('x')\nopen(b'out/bad\\xfe.txt', 'w').write('y')\nopen('out/ok.txt', 'w').write('kept')"})
		if r.st.Status != job.StatusSucceeded || !r.st.ArtifactsTruncated {
			t.Errorf("settlement = %+v (stderr %q), want succeeded, artifacts truncated", r.st, r.stderr)
		}
		check(t, r.st, []string{"out/ok.txt"})
	})
	t.Run("walk bound keeps what comes before", func(t *testing.T) {
		r := f.run(job.Request{Language: "python3", Outputs: []string{"**"},
			Code: "import os\nopen('0.txt', 'w').write('first')\nos.makedirs('/'.join(['a'] * 70))"})
		if r.st.Status != job.StatusSucceeded || !r.st.ArtifactsTruncated {
			t.Errorf("settlement = %+v (stderr %q), want succeeded, artifacts truncated", r.st, r.stderr)
		}
		check(t, r.st, []string{"0.txt"})
	})
	t.Run("no match is an empty list", func(t *testing.T) {
		r := f.run(job.Request{Language: "python3", Code: "print(1)", Outputs: []string{"nothing/*"}})
		if r.st.Artifacts == nil || len(r.st.Artifacts) != 0 {
			t.Errorf("Artifacts = %#v, want []", r.st.Artifacts)
		}
		r = f.run(job.Request{Language: "python3", Code: "print(1)"})
		if r.st.Artifacts != nil {
			t.Errorf("Artifacts = %#v without outputs, want nil", r.st.Artifacts)
		}
	})
}

// A bucket at its bound refuses the put that would pass it: the job still settles, with what
// was stored before and artifacts_truncated.
func TestArtifactsBucketFull(t *testing.T) {
	f := newFleetWith(t, protocol.StreamOptions{ArtifactsMaxBytes: 1 << 20})
	f.startWorker(workerOpts{})
	store, err := f.js.ObjectStore(t.Context(), f.subjects.ArtifactsBucket())
	if err != nil {
		t.Fatal(err)
	}
	r := f.run(job.Request{Language: "python3", Outputs: []string{"*.bin"},
		Code: "open('a.bin', 'wb').write(b'a' * 262144)\nopen('b.bin', 'wb').write(b'b' * 2097152)"})
	if r.st.Status != job.StatusSucceeded || !r.st.ArtifactsTruncated || len(r.st.Artifacts) != 1 || r.st.Artifacts[0].Path != "a.bin" {
		t.Fatalf("settlement = %+v (stderr %q), want succeeded, a.bin only, artifacts truncated", r.st, r.stderr)
	}
	b, err := store.GetBytes(t.Context(), r.st.Artifacts[0].Object)
	if err != nil || len(b) != 262144 {
		t.Errorf("GetBytes(a.bin) = %d bytes, %v; want 262144", len(b), err)
	}
}

// stallingFiles makes sandboxes whose files take forever to read: a workspace that a job made
// slow to walk, or a store that hangs.
type stallingFiles struct{ sandbox.Provider }

func (p stallingFiles) Create(ctx context.Context, shape sandbox.Shape) (sandbox.Sandbox, error) {
	sb, err := p.Provider.Create(ctx, shape)
	if err != nil {
		return nil, err
	}
	return stallingSandbox{sb}, nil
}

type stallingSandbox struct{ sandbox.Sandbox }

func (stallingSandbox) ReadFiles(ctx context.Context, _ func(string) bool, _ func(string, int64, io.Reader) error) error {
	<-ctx.Done()
	return ctx.Err()
}

// Collection has a budget inside the settle budget: a collection that never ends still leaves
// the job time to settle, with artifacts_truncated.
func TestArtifactsCollectionBudget(t *testing.T) {
	f := newFleet(t)
	p, _ := f.provider(false)
	f.startWorker(workerOpts{provider: stallingFiles{p}})
	r := f.run(job.Request{Language: "python3", Code: "open('a.txt', 'w').write('a')", Outputs: []string{"*.txt"}})
	if r.st.Status != job.StatusSucceeded || !r.st.ArtifactsTruncated || len(r.st.Artifacts) != 0 {
		t.Errorf("settlement = %+v, want succeeded, no artifacts, artifacts truncated", r.st)
	}
}
