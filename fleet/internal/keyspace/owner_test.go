package keyspace

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// keyLiteral matches a string literal that spells part of a key name: a hash tag or a segment
// of the names in doc.go.
var keyLiteral = regexp.MustCompile(`^[{}]$|\{[bt][:}]|:\{|:index\}|:(job|lease|epoch3?|running|usage|redrives?|pos|stop|hold)(:|$)`)

// TestOneOwner fails when a non-test Go file of the fleet module outside this package makes a
// Redis script (redis.NewScript), holds Lua (a string calling redis.call), or spells part of a
// key name, or when a .lua file lies outside it: the keyspace has one owner.
func TestOneOwner(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../..") // the fleet module
	if err != nil {
		t.Fatal(err)
	}
	self, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && (path == self || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")):
			return filepath.SkipDir
		case strings.HasSuffix(path, ".lua"):
			t.Errorf("%s: a Lua script outside package keyspace", path)
			return nil
		case d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go"):
			return nil
		}
		files++
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr:
				if n.Sel.Name == "NewScript" {
					t.Errorf("%s:%d: a Redis script made outside package keyspace", rel, fset.Position(n.Pos()).Line)
				}
			case *ast.BasicLit:
				if n.Kind != token.STRING {
					break
				}
				s, err := strconv.Unquote(n.Value)
				if err != nil {
					break
				}
				if strings.Contains(s, "redis.call") {
					t.Errorf("%s:%d: Lua outside package keyspace", rel, fset.Position(n.Pos()).Line)
				} else if keyLiteral.MatchString(s) {
					t.Errorf("%s:%d: %s spells a Redis key outside package keyspace", rel, fset.Position(n.Pos()).Line, n.Value)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read %d Go files under %s, want the whole fleet module", files, root)
	}
}
