package providertest

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// filesCode leaves regular files, a directory, links out of /workspace and a FIFO.
const filesCode = `import os
os.makedirs('out/sub', exist_ok=True)
open('out/a.txt', 'w').write('alpha')
open('out/sub/b.bin', 'wb').write(bytes(range(256)) * 4)
open('note.log', 'w').write('n')
os.symlink('/etc/passwd', 'out/passwd')
os.symlink('/etc', 'out/etc')
os.symlink('a.txt', 'out/inside')
os.mkfifo('out/fifo')
os.makedirs('out/empty')
`

// runFiles checks [sandbox.FileReader]: after Run, the regular files the program left are read
// byte-exact in path order; links, directories and FIFOs are not; a timed-out program's files
// stay; fn may stop the walk.
func runFiles(ctx context.Context, t *testing.T, e Env) {
	if _, ok := any(createFor(ctx, t, e, nil)).(sandbox.FileReader); !ok {
		t.Fatalf("%s sandboxes do not implement sandbox.FileReader", e.Provider.Name())
	}
	all := func(string) bool { return true }
	t.Run("regular files only", func(t *testing.T) {
		got := readAfter(ctx, t, e, filesCode, nil, all, nil)
		want := map[string]string{"note.log": "n", "out/a.txt": "alpha", "out/sub/b.bin": string(bytes.Repeat(seq256(), 4))}
		var paths []string
		for _, f := range got {
			paths = append(paths, f.path)
			if w, ok := want[f.path]; !ok || f.data != w || f.size != int64(len(w)) {
				t.Errorf("file %s: %d bytes (size %d), want %q's %d", f.path, len(f.data), f.size, clip(w), len(w))
			}
		}
		if wantPaths := []string{"note.log", "out/a.txt", "out/sub/b.bin"}; !slices.Equal(paths, wantPaths) {
			t.Errorf("paths = %q, want %q (path order, no link, FIFO or directory)", paths, wantPaths)
		}
	})
	t.Run("match and stop", func(t *testing.T) {
		n := 0
		got := readAfter(ctx, t, e, filesCode, nil, func(p string) bool { return strings.HasPrefix(p, "out/") },
			func() error {
				if n++; n == 1 {
					return nil
				}
				return fs.SkipAll
			})
		if len(got) != 2 || got[0].path != "out/a.txt" {
			t.Errorf("files = %v, want out/a.txt then a stop", got)
		}
	})
	t.Run("kept after timeout", func(t *testing.T) {
		code := "open('partial.csv', 'w').write('x,1\\n')\nprint('written', flush=True)\nimport time\ntime.sleep(60)"
		got := readAfter(ctx, t, e, code, func(l *sandbox.Limits) { l.Timeout = 2 * time.Second }, all, nil)
		if len(got) != 1 || got[0].data != "x,1\n" {
			t.Errorf("files = %v, want partial.csv", got)
		}
	})
}

type readFile struct {
	path string
	size int64
	data string
}

func seq256() []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

// createFor takes a python3 sandbox (from the suite's pool under [Run]) and assigns it a test job
// with limits mod changed; it is destroyed when the test ends.
func createFor(ctx context.Context, t *testing.T, e Env, mod func(*sandbox.Limits)) sandbox.Sandbox {
	t.Helper()
	sb := take(ctx, t, e, e.Profiles["python3"])
	t.Cleanup(func() {
		if err := sb.Destroy(context.WithoutCancel(ctx)); err != nil {
			t.Errorf("Destroy() error = %v", err)
		}
	})
	assign(ctx, t, sb, mod)
	return sb
}

// readAfter runs code, then reads the files match accepts; each is recorded before next decides
// whether to go on.
func readAfter(ctx context.Context, t *testing.T, e Env, code string, mod func(*sandbox.Limits), match func(string) bool, next func() error) []readFile {
	t.Helper()
	sb := createFor(ctx, t, e, mod)
	payload, err := profile.Payload(job.Request{Code: code})
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	if _, err := sb.Run(ctx, bytes.NewReader(payload), io.Discard, &stderr); err != nil {
		t.Fatalf("Run() error = %v", err)
	}
	var got []readFile
	err = sb.(sandbox.FileReader).ReadFiles(ctx, match, func(p string, size int64, r io.Reader) error {
		b, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		got = append(got, readFile{p, size, string(b)})
		if next != nil {
			return next()
		}
		return nil
	})
	if err != nil {
		t.Fatalf("ReadFiles() error = %v (stderr %q)", err, clip(stderr.String()))
	}
	return got
}

// PlotCode draws a plot with pandas and matplotlib and saves it to out/plot.png; it prints the
// backend, which the python3-data profile sets, not the job.
const PlotCode = `import os
import numpy as np
import pandas as pd
import matplotlib
import matplotlib.pyplot as plt
x = np.linspace(0, 4 * np.pi, 200)
df = pd.DataFrame({"x": x, "sin": np.sin(x)})
os.makedirs("out", exist_ok=True)
df.plot(x="x", y="sin").figure.savefig("out/plot.png", dpi=60)
print(matplotlib.get_backend())
`

// RunDataProfile runs [PlotCode] in e's python3-data profile and reads the plot back: a PNG.
func RunDataProfile(t *testing.T, e Env) {
	prof, ok := e.Profiles[profile.DataProfile]
	if !ok {
		testenv.Missing(t, "profile %s: the root fs or image lacks numpy, pandas or matplotlib (make image)", profile.DataProfile)
	}
	ctx := t.Context()
	sb := Create(ctx, t, e, prof, func(l *sandbox.Limits) { l.Timeout, l.MemoryBytes = 60*time.Second, 512<<20 })
	defer sb.Destroy(context.WithoutCancel(ctx))
	payload, _ := profile.Payload(job.Request{Code: PlotCode})
	var out, errb bytes.Buffer
	exit, err := sb.Run(ctx, bytes.NewReader(payload), &out, &errb)
	if err != nil || exit.Code != 0 || strings.TrimSpace(out.String()) != "agg" {
		t.Fatalf("Run() = %+v, %v; stdout %q, stderr %q; want exit 0 printing agg", exit, err, out.String(), clip(errb.String()))
	}
	var png []byte
	err = sb.(sandbox.FileReader).ReadFiles(ctx, func(p string) bool { return p == "out/plot.png" }, func(_ string, _ int64, r io.Reader) error {
		png, err = io.ReadAll(r)
		return err
	})
	if err != nil || len(png) < 1000 || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("ReadFiles() = %d bytes (%q…), %v; want a PNG", len(png), png[:min(len(png), 8)], err)
	}
}
