package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const keepCode = "import os\nos.makedirs('out/sub')\nopen('out/a.csv','w').write('1,2\\n')\nopen('out/sub/b.txt','w').write('b')\nopen('skip.txt','w').write('no')\nprint('done')"

// TestOutputDownloads: --output keeps the matching files and --artifacts DIR receives them once
// the job settled; `submit artifacts ID DIR` downloads them again.
func TestOutputDownloads(t *testing.T) {
	dir := t.TempDir()
	got := submit(t, "", "--lang", "python3", "--output", "out/*.csv", "--output", "out/**/*.txt", "--artifacts", dir, "--code", keepCode)
	if got.code != 0 || got.stdout != "done\n" {
		t.Fatalf("submit = %d %q %q", got.code, got.stdout, got.stderr)
	}
	want := map[string]string{"out/a.csv": "1,2\n", "out/sub/b.txt": "b"}
	check := func(dir string) {
		t.Helper()
		for p, content := range want {
			if b, err := os.ReadFile(filepath.Join(dir, p)); err != nil || string(b) != content {
				t.Errorf("%s = %q, %v; want %q", p, b, err, content)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, "skip.txt")); err == nil {
			t.Errorf("skip.txt downloaded, want only what --output matched")
		}
	}
	check(dir)

	noWait := submit(t, "", "--no-wait", "--lang", "python3", "--output", "out/**", "--code", keepCode)
	id := strings.TrimSpace(noWait.stdout)
	if w := submit(t, "", "watch", id); w.code != 0 {
		t.Fatalf("watch = %d %q", w.code, w.stderr)
	}
	again := t.TempDir()
	if a := submit(t, "", "artifacts", id, again); a.code != 0 || !strings.Contains(a.stderr, "saved") {
		t.Fatalf("submit artifacts = %d %q %q", a.code, a.stdout, a.stderr)
	}
	check(again)
	if a := submit(t, "", "artifacts"); a.code != exitUsage || !strings.Contains(a.stderr, "usage: submit artifacts ID [DIR]") {
		t.Errorf("submit artifacts without an id = %d %q", a.code, a.stderr)
	}
}
