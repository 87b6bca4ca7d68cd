package profile_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/runfleet/runfleet/fleet/internal/profile"
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

// TestDataProfile: python3-data is offered only by a root fs with its packages, draws with Agg
// set by the profile, and has a digest of its own.
func TestDataProfile(t *testing.T) {
	root := t.TempDir()
	if profile.Builtin(root, "").Has(profile.DataProfile) {
		t.Errorf("a root fs without numpy, pandas and matplotlib offers %s", profile.DataProfile)
	}
	for _, f := range profile.DataRequires {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := profile.Builtin(root, "")
	data, ok := s[profile.DataProfile]
	if !ok {
		t.Fatalf("a root fs with the packages offers %v, want %s too", s.Names(), profile.DataProfile)
	}
	if !slices.Contains(data.Interpreter, "MPLBACKEND=Agg") || data.Digest == "" || data.Digest == s["python3"].Digest {
		t.Errorf("%s = %+v; want MPLBACKEND=Agg in its command and a digest of its own", profile.DataProfile, data)
	}
	if !profile.Builtin("", "runfleet-sandbox:latest").Has(profile.DataProfile) {
		t.Errorf("an image profile set lacks %s: the Docker provider's Resolve decides", profile.DataProfile)
	}
}
