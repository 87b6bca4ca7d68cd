package profile_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runfleet/runfleet/internal/profile"
)

func TestLoad(t *testing.T) {
	cases := []struct {
		name, file string
		err        string
		check      func(t *testing.T, s profile.Set)
	}{
		{name: "adds a profile with a built-in bootstrap", file: `[{"name":"python3-venv","interpreter":["/opt/venv/bin/python3"],"bootstrap":"python3"}]`,
			check: func(t *testing.T, s profile.Set) {
				p := s["python3-venv"]
				if len(p.Interpreter) != 4 || p.Interpreter[1] != "-I" || !strings.HasPrefix(p.Digest, "sha256:") || !s.Has("nodejs") {
					t.Errorf("profile = %+v, want the bootstrap appended, a digest, and the built-ins kept", p)
				}
			}},
		{name: "image profile keeps its pinned digest", file: `[{"name":"py","interpreter":["/usr/bin/python3"],"bootstrap":"python3","image":"img","digest":"sha256:abc"}]`,
			check: func(t *testing.T, s profile.Set) {
				if s["py"].Digest != "sha256:abc" {
					t.Errorf("digest = %q", s["py"].Digest)
				}
			}},
		{name: "bad name", file: `[{"name":"Py Thon","interpreter":["x"]}]`, err: "name"},
		{name: "no interpreter", file: `[{"name":"x"}]`, err: "no interpreter"},
		{name: "unknown bootstrap", file: `[{"name":"x","interpreter":["x"],"bootstrap":"ruby"}]`, err: "unknown bootstrap"},
		{name: "not json", file: `name: x`, err: "invalid character"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "profiles.json")
			if err := os.WriteFile(path, []byte(c.file), 0o644); err != nil {
				t.Fatal(err)
			}
			s, err := profile.Load(path, profile.Builtin("", ""))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Errorf("Load() error = %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load() error = %v", err)
			}
			c.check(t, s)
		})
	}
}

func TestDigestFollowsTheInterpreter(t *testing.T) {
	a := profile.Builtin("", "")["python3"]
	b := profile.Builtin("/srv/rootfs", "")["python3"]
	if a.Digest == b.Digest {
		t.Errorf("digests of different roots are equal: %s", a.Digest)
	}
	if again := profile.Builtin("", "")["python3"]; again.Digest != a.Digest {
		t.Errorf("digest is not stable: %s then %s", a.Digest, again.Digest)
	}
}
