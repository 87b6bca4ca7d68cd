package cli

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	for _, tt := range []struct {
		name, set, module, want string
	}{
		{"set by the build", "v1.2.3", "v0.1.0", "v1.2.3 "},
		{"go install of a tag", "dev", "v0.1.0", "v0.1.0 "},
		{"a workspace build", "dev", "(devel)", "dev "},
		{"no module version", "dev", "", "dev "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			info := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/runfleet/runfleet/cmd", Version: tt.module}}
			if got := version(tt.set, info); !strings.HasPrefix(got, tt.want) {
				t.Errorf("version(%q, module %q) = %q, want it to start %q", tt.set, tt.module, got, tt.want)
			}
		})
	}
}
