package testenv

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// repoRoot is the directory holding go.work, above the package's directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.work above the package directory")
		}
		dir = parent
	}
}

// buildOutput are the top-level directories builds and demos write (.gitignore).
var buildOutput = []string{"bin", "var", "out"}

// repoFiles lists the repository's files whose names end in ext, skipping build output and
// hidden directories.
func repoFiles(t *testing.T, root, ext string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			rel, _ := filepath.Rel(root, path)
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || slices.Contains(buildOutput, rel)) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ext) {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// listedPrograms reads the first column of scripts/programs.
func listedPrograms(t *testing.T, root string) map[string]bool {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "scripts/programs"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	listed := map[string]bool{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		if len(fields) != 3 {
			t.Errorf("scripts/programs: %q is not `program mode source`", s.Text())
		}
		listed[fields[0]] = true
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return listed
}

// programsRun returns the programs a Go file names in exec.LookPath, exec.Command and
// exec.CommandContext calls, with their positions; `docker compose` counts as docker-compose,
// the CLI plugin. A program held in a variable is the business of the call that named it.
func programsRun(fset *token.FileSet, f *ast.File) map[string]token.Position {
	found := map[string]token.Position{}
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "exec" {
			return true
		}
		first := map[string]int{"LookPath": 0, "Command": 0, "CommandContext": 1}
		i, ok := first[sel.Sel.Name]
		if !ok || len(call.Args) <= i {
			return true
		}
		name := stringLit(call.Args[i])
		if name == "" {
			return true
		}
		if name == "docker" && len(call.Args) > i+1 && stringLit(call.Args[i+1]) == "compose" {
			name = "docker-compose"
		}
		found[name] = fset.Position(call.Pos())
		return true
	})
	return found
}

func stringLit(e ast.Expr) string {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return ""
	}
	s, err := strconv.Unquote(lit.Value)
	if err != nil {
		return ""
	}
	return s
}

// TestProgramsListed: every program a Go file of the repository looks up or runs is in
// scripts/programs, so that scripts/setup installs it and a fresh machine passes `make test`.
func TestProgramsListed(t *testing.T) {
	root := repoRoot(t)
	listed := listedPrograms(t, root)
	fset := token.NewFileSet()
	for _, path := range repoFiles(t, root, ".go") {
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for name, pos := range programsRun(fset, f) {
			if !listed[name] {
				rel, _ := filepath.Rel(root, pos.Filename)
				t.Errorf("%s:%d runs %s, which scripts/programs does not list", rel, pos.Line, name)
			}
		}
	}
}

var (
	// mdLink is a markdown link's target.
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// word is a run of characters a file name is made of, with the wildcards and placeholders
	// that make it a pattern rather than a name.
	word = regexp.MustCompile(`[A-Za-z0-9_.\-/*{}<>$]+`)
	// fileExt are the extensions that make a word a file name wherever it appears.
	fileExt = regexp.MustCompile(`\.(go|md|mod|sum|work|yaml|yml|json|sh)$`)
	// moduleTag is a nested module's tag (cmd/v0.1.0, internal/vX.Y.Z): a name, not a path.
	moduleTag = regexp.MustCompile(`/v([0-9]+|X)\.([0-9]+|Y)\.([0-9]+|Z)$`)
)

// notFiles are words that look like file names and are not: the NATS Go client's name.
var notFiles = map[string]bool{
	"nats.go": true,
	// Files of Dify's repository, which the README's "Pointing Dify at it" tells the user to edit.
	"docker/docker-compose.override.yaml": true,
	"docker-compose.yaml":                 true,
}

// citedFiles returns the repository paths text cites: words ending in a file extension, and
// words with a slash whose first element is a top-level entry of the repository (scripts/setup,
// internal/lease/). Build output (var/rootfs) and import paths (a domain first) are not citations.
func citedFiles(text string, top map[string]bool) []string {
	var cited []string
	for _, w := range word.FindAllString(text, -1) {
		w = strings.TrimRight(w, ".-/")
		w = strings.TrimLeft(w, "./")
		if w == "" || strings.ContainsAny(w, "*{}<>$") || notFiles[w] || moduleTag.MatchString(w) {
			continue
		}
		first, _, nested := strings.Cut(w, "/")
		if nested && strings.Contains(first, ".") && !fileExt.MatchString(first) {
			continue // an import path or URL host
		}
		if slices.Contains(buildOutput, first) {
			continue
		}
		if fileExt.MatchString(w) || (nested && top[first]) {
			cited = append(cited, w)
		}
	}
	return cited
}

// exists reports whether name exists relative to dir or to one of its parents up to root.
func exists(root, dir, name string) bool {
	for {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return true
		}
		if dir == root || len(dir) < len(root) {
			return false
		}
		dir = filepath.Dir(dir)
	}
}

// TestDocPaths: every relative link of README.md and docs/*.md, and every repository file name
// they or a Go comment cite, exists.
func TestDocPaths(t *testing.T) {
	root := repoRoot(t)
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	// The fleet module's top-level entries (cmd, internal, deploy) are cited as such too.
	fleetEntries, err := os.ReadDir(filepath.Join(root, "fleet"))
	if err != nil {
		t.Fatal(err)
	}
	top := map[string]bool{}
	for _, e := range append(entries, fleetEntries...) {
		top[e.Name()] = true
	}
	check := func(path string, line int, name string) {
		if !exists(root, filepath.Dir(path), name) && !exists(root, filepath.Join(root, "fleet"), name) {
			rel, _ := filepath.Rel(root, path)
			t.Errorf("%s:%d cites %s, which does not exist", rel, line, name)
		}
	}

	docs, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	for _, path := range append([]string{filepath.Join(root, "README.md")}, docs...) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target, _, _ := strings.Cut(m[1], "#")
				if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				if _, err := os.Stat(filepath.Join(filepath.Dir(path), target)); err != nil {
					rel, _ := filepath.Rel(root, path)
					t.Errorf("%s:%d links to %s, which does not exist", rel, i+1, m[1])
				}
			}
			for _, name := range citedFiles(line, top) {
				check(path, i+1, name)
			}
		}
	}

	fset := token.NewFileSet()
	for _, path := range repoFiles(t, root, ".go") {
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range f.Comments {
			for _, c := range g.List {
				for _, name := range citedFiles(c.Text, top) {
					check(path, fset.Position(c.Pos()).Line, name)
				}
			}
		}
	}
}

// TestMainNeverPassesVacuously: no TestMain of the repository exits 0 without running the tests
// (`return 0` or `os.Exit(0)`), which makes `go test` say ok having run none. A TestMain that
// lacks a part lets the tests that need it skip by name (Missing), or fails in CI.
func TestMainNeverPassesVacuously(t *testing.T) {
	root := repoRoot(t)
	fset := token.NewFileSet()
	for _, path := range repoFiles(t, root, "_test.go") {
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Name.Name != "TestMain" || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				var zero ast.Expr
				switch n := n.(type) {
				case *ast.ReturnStmt:
					if len(n.Results) == 1 {
						zero = n.Results[0]
					}
				case *ast.CallExpr:
					if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Exit" && len(n.Args) == 1 {
						if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "os" {
							zero = n.Args[0]
						}
					}
				}
				if lit, ok := zero.(*ast.BasicLit); ok && lit.Value == "0" {
					pos := fset.Position(n.Pos())
					rel, _ := filepath.Rel(root, pos.Filename)
					t.Errorf("%s:%d: TestMain exits 0 without running the tests", rel, pos.Line)
				}
				return true
			})
		}
	}
}
