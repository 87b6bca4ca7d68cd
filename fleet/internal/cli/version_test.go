package cli

import (
	"runtime/debug"
	"testing"
)

func TestVersion(t *testing.T) {
	for _, tt := range []struct {
		name, set, module, want string
	}{
		{"set by the build", "v1.2.3", "v0.1.0", "v1.2.3"},
		{"go install of a tag", "dev", "v0.1.0", "v0.1.0"},
		{"go install, nothing set", "", "v0.1.0", "v0.1.0"},
		{"a workspace build", "dev", "(devel)", "dev"},
		{"no module version", "dev", "", "dev"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			info := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/runfleet/runfleet/fleet", Version: tt.module}}
			if got := resolve(tt.set, info); got != tt.want {
				t.Errorf("resolve(%q, module %q) = %q, want %q", tt.set, tt.module, got, tt.want)
			}
		})
	}
	if got := resolve("dev", nil); got != "dev" {
		t.Errorf("resolve without build info = %q, want dev", got)
	}
	info := &debug.BuildInfo{GoVersion: "go1.26.8", Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.modified", Value: "true"}}}
	if got, want := describe("v1.2.3", info), "v1.2.3 (0123456789ab+dirty, go1.26.8)"; got != want {
		t.Errorf("describe = %q, want %q", got, want)
	}
}
