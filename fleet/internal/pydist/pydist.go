// Package pydist reads which Python packages a root file system holds: the worker announces its
// python3 profiles' packages from it, and the gateway lists them where no worker announced any.
package pydist

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
)

// Package is one installed Python package.
type Package struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// String is the package as `pip freeze` prints it.
func (p Package) String() string {
	if p.Version == "" {
		return p.Name
	}
	return p.Name + "==" + p.Version
}

// pythonPackages is where Debian installs the packages of its python3-* archives.
const pythonPackages = "usr/lib/python3/dist-packages"

// Read lists the Python packages installed in the root fs at root ("/" for the host's), as
// dify-sandbox lists its own: the name and version of each *.dist-info and *.egg-info of its
// dist-packages, from their metadata (one whose metadata cannot be read is left out), sorted by
// name. A root fs without Python packages lists none.
func Read(root string) ([]Package, error) {
	fsys := os.DirFS(root)
	entries, err := fs.ReadDir(fsys, pythonPackages)
	if os.IsNotExist(err) {
		return []Package{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("python packages of %s: %w", root, err)
	}
	deps := []Package{}
	for _, e := range entries {
		name := e.Name()
		var meta string
		switch {
		case strings.HasSuffix(name, ".dist-info"):
			meta = path.Join(pythonPackages, name, "METADATA")
		case strings.HasSuffix(name, ".egg-info") && e.IsDir():
			meta = path.Join(pythonPackages, name, "PKG-INFO")
		case strings.HasSuffix(name, ".egg-info"):
			meta = path.Join(pythonPackages, name)
		default:
			continue
		}
		// A package whose metadata cannot be read is left out rather than failing the list.
		if d, err := readMetadata(fsys, meta); err == nil && d.Name != "" {
			deps = append(deps, d)
		}
	}
	slices.SortFunc(deps, func(a, b Package) int {
		return cmp.Compare(strings.ToLower(a.Name), strings.ToLower(b.Name))
	})
	return deps, nil
}

// readMetadata reads the Name and Version headers of a package's metadata file.
func readMetadata(fsys fs.FS, name string) (Package, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return Package{}, err
	}
	defer f.Close()
	var d Package
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for sc.Scan() && (d.Name == "" || d.Version == "") {
		line := sc.Text()
		if line == "" {
			break // the headers end at the first blank line
		}
		if v, ok := strings.CutPrefix(line, "Name: "); ok {
			d.Name = strings.TrimSpace(v)
		} else if v, ok := strings.CutPrefix(line, "Version: "); ok {
			d.Version = strings.TrimSpace(v)
		}
	}
	return d, sc.Err()
}
