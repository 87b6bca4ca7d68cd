package worker

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runfleet/runfleet/fleet/internal/profile"
)

// TestLanguagesShippedWithTheRoot: the manifests a root fs ships are served with no --langs; one
// of --langs replaces a shipped one of its name; one whose toolchain the root lacks is left out
// and said.
func TestLanguagesShippedWithTheRoot(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/bin/tool"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	manifest := func(name, version, requires string) []byte {
		return fmt.Appendf(nil, `{"name":%q,"version":%q,"source":"main","run":[%q,"main"],"requires":[%q],"test":{"code":"x","stdout":""}}`,
			name, version, requires, requires)
	}
	shipped := map[string][]byte{
		"tool.json":    manifest("tool", "1", "/usr/bin/tool"),
		"lacking.json": manifest("lacking", "1", "/usr/bin/absent"),
	}
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))

	s, err := langs(Config{}, profile.Set{}, shipped, root, "", log)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Has("tool") || s.Has("lacking") || s["tool"].Version != "1" || !strings.Contains(logs.String(), "lacking") {
		t.Fatalf("langs() = %v, log %q; want tool served, lacking left out and said", s.Names(), logs.String())
	}

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tool.json"), manifest("tool", "2", "/usr/bin/tool"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err = langs(Config{Langs: dir}, profile.Set{}, shipped, root, "", log)
	if err != nil || s["tool"].Version != "2" {
		t.Fatalf("langs(--langs) = %v, %v; want --langs's tool, version 2", s["tool"], err)
	}
	if _, err := langs(Config{}, profile.Set{}, map[string][]byte{"bad.json": []byte(`{"name":"bad","nope":1}`)}, root, "", log); err == nil || !strings.Contains(err.Error(), profile.ShippedDir) {
		t.Errorf("langs(a bad shipped manifest) error = %v, want one naming %s", err, profile.ShippedDir)
	}
}

// TestShippedManifestKeepsItsRoot: a manifest a root fs or image ships is of that root or image;
// one naming another (the host's whole "/", an image the operator never chose) is refused, so
// that the root's author does not widen what of the host a sandbox sees.
func TestShippedManifestKeepsItsRoot(t *testing.T) {
	root := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	for _, field := range []string{`"root":"/"`, `"image":"elsewhere:latest"`} {
		shipped := map[string][]byte{"sh.json": fmt.Appendf(nil,
			`{"name":"sh","source":"main","run":["/bin/sh","main"],%s,"test":{"code":"x","stdout":""}}`, field)}
		s, err := langs(Config{}, profile.Set{}, shipped, root, "", log)
		if err == nil {
			t.Errorf("langs(shipped manifest with %s) = sh on root %q, image %q; want an error", field, s["sh"].Root, s["sh"].Image)
		}
	}
}
