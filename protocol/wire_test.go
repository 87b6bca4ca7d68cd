package protocol_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/runfleet/runfleet/protocol"
)

// TestWireDefinedOnce guards the rule of this package: no wire name is written outside it and
// package job. It reads every non-test Go file of both modules for the string literals of the
// metadata keys and the JetStream API prefix, and for struct tags that only a tenant policy or a
// heartbeat carries, so that a second definition fails here instead of drifting.
func TestWireDefinedOnce(t *testing.T) {
	literals := map[string]string{
		protocol.MetadataQueue:        "protocol.MetadataQueue",
		protocol.MetadataTenant:       "protocol.MetadataTenant",
		protocol.MetadataHistoryUntil: "protocol.MetadataHistoryUntil",
	}
	prefixes := map[string]string{
		protocol.FirstMadeKey(""):      "protocol.FirstMadeKey",
		protocol.TenantMadeKey("", ""): "protocol.TenantMadeKey",
		"$JS.":                         "protocol.APIPrefix",
		"DIRECT.GET":                   "protocol.DirectGetSubject",
	}
	tags := map[string]string{
		"api_keys_sha256": "protocol.TenantPolicy",
		"max_running":     "protocol.TenantPolicy",
		"cgroup":          "protocol.Heartbeat",
		"slots":           "protocol.Heartbeat",
	}
	// Output shapes of a CLI that print a policy, not read one.
	allowTags := map[string]bool{"fleet/cmd/submit/tenant.go max_running": true}

	root := ".."
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			switch {
			case rel == ".":
			// var holds root file systems (make image, make langs), no source of runfleet's.
			case rel == "protocol", rel == "job", rel == "var", strings.HasPrefix(d.Name(), "."), d.Name() == "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BasicLit:
				if n.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(n.Value)
				if err != nil {
					return true
				}
				if name, ok := literals[s]; ok {
					t.Errorf("%s: %q, want %s", fset.Position(n.Pos()), s, name)
				}
				for p, name := range prefixes {
					if strings.Contains(s, p) {
						t.Errorf("%s: %q, want %s", fset.Position(n.Pos()), s, name)
					}
				}
			case *ast.Field:
				if n.Tag == nil {
					return true
				}
				tag, err := strconv.Unquote(n.Tag.Value)
				if err != nil {
					return true
				}
				name, _, _ := strings.Cut(reflect.StructTag(tag).Get("json"), ",")
				if want, ok := tags[name]; ok && !allowTags[rel+" "+name] {
					t.Errorf("%s: a field tagged json:%q, want %s", fset.Position(n.Pos()), name, want)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 { // the walk missed the fleet module
		t.Errorf("read %d files, want the fleet module's too", files)
	}
}

// TestImports: the package imports only the standard library, nats.go and job, so that every
// fleet process and every service that imports the client can share it.
func TestImports(t *testing.T) {
	allowed := map[string]bool{
		"github.com/nats-io/nats.go":           true,
		"github.com/nats-io/nats.go/jetstream": true,
		"github.com/runfleet/runfleet/job":     true,
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			first, _, _ := strings.Cut(path, "/")
			if strings.Contains(first, ".") && !allowed[path] {
				t.Errorf("%s imports %s, want only the standard library, nats.go and job", name, path)
			}
		}
	}
}
