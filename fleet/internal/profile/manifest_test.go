package profile_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runfleet/runfleet/fleet/internal/profile"
)

const bashManifest = `{"name":"sh2","version":"1","aliases":["shell"],"source":"main.sh","run":["/bin/sh","main.sh"],
	"requires":["/bin/sh"],"test":{"code":"echo OK","stdout":"OK\n"}}`

func TestDecodeManifest(t *testing.T) {
	cases := []struct{ name, file, err string }{
		{name: "valid", file: bashManifest},
		{name: "unknown field", file: `{"name":"x","source":"m","run":["x"],"test":{"code":"x","stdout":""},"compile_timeout":1}`, err: "unknown field"},
		{name: "bad name", file: `{"name":"C++","source":"m","run":["x"],"test":{"code":"x","stdout":""}}`, err: "name"},
		{name: "source with a slash", file: `{"name":"x","source":"../m","run":["x"],"test":{"code":"x","stdout":""}}`, err: "source"},
		{name: "no run", file: `{"name":"x","source":"m","test":{"code":"x","stdout":""}}`, err: "no run"},
		{name: "no test", file: `{"name":"x","source":"m","run":["x"]}`, err: "no test"},
		{name: "compile without argv", file: `{"name":"x","source":"m","run":["x"],"compile":{},"test":{"code":"x","stdout":""}}`, err: "compile without argv"},
		{name: "negative limit", file: `{"name":"x","source":"m","run":["x"],"compile":{"argv":["cc"],"timeout_ms":-1},"test":{"code":"x","stdout":""}}`, err: "negative"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := profile.DecodeManifest(strings.NewReader(c.file))
			if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
				t.Errorf("DecodeManifest() error = %v, want one containing %q", err, c.err)
			}
		})
	}
}

// TestLoadDir: a manifest adds a profile with its alias and a digest that follows the manifest;
// one whose root lacks what it requires is skipped; an alias may not name two profiles.
func TestLoadDir(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("sh2.json", bashManifest)
	write("missing.json", `{"name":"missing","source":"m","run":["/nonexistent/bin"],"requires":["/nonexistent/bin"],"test":{"code":"x","stdout":""}}`)
	s, skipped, err := profile.LoadDir(dir, profile.Builtin("", ""), "", "")
	if err != nil {
		t.Fatal(err)
	}
	p, ok := s.Lookup("shell")
	if !ok || p.Name != "sh2" || !strings.HasPrefix(p.Digest, "sha256:") || !s.Has("python3") || len(skipped) != 1 || skipped[0] != "missing" {
		t.Fatalf("LoadDir() = %v skipped %v; want sh2 under its alias with a digest, the built-ins, and missing skipped", s.Names(), skipped)
	}
	write("sh2.json", strings.Replace(bashManifest, `"version":"1"`, `"version":"2"`, 1))
	again, _, err := profile.LoadDir(dir, nil, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if again["sh2"].Digest == p.Digest {
		t.Errorf("digest %s did not change with the manifest", p.Digest)
	}
	if _, _, err := profile.LoadDir(filepath.Join(dir, "none"), nil, "", ""); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadDir(a directory that does not exist) error = %v, want ErrNotExist", err)
	}
	if files, err := profile.ReadManifests(filepath.Join(dir, "none")); files != nil || err != nil {
		t.Errorf("ReadManifests(a directory that does not exist) = %v, %v; want none, as a root fs that ships no language", files, err)
	}
	write("clash.json", `{"name":"clash","aliases":["shell"],"source":"m","run":["/bin/sh"],"test":{"code":"x","stdout":""}}`)
	if _, _, err := profile.LoadDir(dir, nil, "", ""); err == nil || !strings.Contains(err.Error(), "shell") {
		t.Errorf("LoadDir() error = %v, want the alias naming two profiles", err)
	}
}

// TestReadShippedStaysInRoot: the manifests a root fs ships are read inside it: a link out of
// the root (to a host file) is not followed, as the Docker provider reads an image's regular
// files only; a root without the directory ships none.
func TestReadShippedStaysInRoot(t *testing.T) {
	root, host := t.TempDir(), t.TempDir()
	dir := filepath.Join(root, profile.ShippedDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if files, err := profile.ReadShipped(t.TempDir()); err != nil || files != nil {
		t.Fatalf("ReadShipped(root without %s) = %v, %v; want none", profile.ShippedDir, files, err)
	}
	secret := filepath.Join(host, "secret.json")
	if err := os.WriteFile(secret, []byte(`{"host":"secret"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(dir, "link.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sh.json"), []byte(`{"name":"sh"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	files, err := profile.ReadShipped(root)
	if err != nil || len(files) != 1 || string(files["sh.json"]) != `{"name":"sh"}` {
		t.Fatalf("ReadShipped(root) = %q, %v; want sh.json alone", files, err)
	}
}
