package gateway_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/runfleet/runfleet/fleet/internal/gateway"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
)

// TestReadDependencies: the packages of a root fs, from their metadata, whichever of Debian's
// three layouts they use.
func TestReadDependencies(t *testing.T) {
	root := t.TempDir()
	pkgs := filepath.Join(root, "usr/lib/python3/dist-packages")
	for name, content := range map[string]string{
		"httpx-0.23.3.dist-info/METADATA": "Metadata-Version: 2.1\nName: httpx\nVersion: 0.23.3\n\nName: not a header\n",
		"Jinja2-3.1.2.egg-info/PKG-INFO":  "Metadata-Version: 2.1\nName: Jinja2\nVersion: 3.1.2\n",
		"requests-2.28.1.egg-info":        "Metadata-Version: 2.1\nName: requests\nVersion: 2.28.1\n",
		"jinja2/__init__.py":              "",
		"matplotlib-3.6.3-nspkg.pth":      "",
	} {
		p := filepath.Join(pkgs, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	deps, err := gateway.ReadDependencies(root)
	want := []gateway.Dependency{{Name: "httpx", Version: "0.23.3"}, {Name: "Jinja2", Version: "3.1.2"}, {Name: "requests", Version: "2.28.1"}}
	if err != nil || !slices.Equal(deps, want) {
		t.Errorf("ReadDependencies = %+v, %v; want %+v", deps, err, want)
	}
	if deps, err := gateway.ReadDependencies(t.TempDir()); err != nil || len(deps) != 0 || deps == nil {
		t.Errorf("ReadDependencies(empty root) = %#v, %v; want an empty list", deps, err)
	}
}

// TestRootFSShipsDifyPackages: the sandbox root fs holds what dify-sandbox ships, and the gateway
// lists it.
func TestRootFSShipsDifyPackages(t *testing.T) {
	root := testenv.RootFS(t)
	if root == "" {
		testenv.Missing(t, "RUNFLEET_TEST_ROOTFS (the sandbox root fs)")
	}
	deps, err := gateway.ReadDependencies(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"Jinja2", "httpx", "requests"} {
		if !slices.ContainsFunc(deps, func(d gateway.Dependency) bool { return d.Name == name && d.Version != "" }) {
			t.Errorf("the root fs %s lists no %s: %+v", root, name, deps)
		}
	}
}
