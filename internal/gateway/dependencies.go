package gateway

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

// pythonPackages is where Debian installs the packages of its python3-* archives.
const pythonPackages = "usr/lib/python3/dist-packages"

// ReadDependencies lists the Python packages installed in the root fs at root (the profile's
// --rootfs, "/" for the host's), as dify-sandbox lists its own: the name and version of each
// *.dist-info and *.egg-info of its dist-packages, from their metadata (one whose metadata cannot
// be read is left out). A root fs without Python packages lists none.
func ReadDependencies(root string) ([]Dependency, error) {
	fsys := os.DirFS(root)
	entries, err := fs.ReadDir(fsys, pythonPackages)
	if os.IsNotExist(err) {
		return []Dependency{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("python packages of %s: %w", root, err)
	}
	deps := []Dependency{}
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
	slices.SortFunc(deps, func(a, b Dependency) int {
		return cmp.Compare(strings.ToLower(a.Name), strings.ToLower(b.Name))
	})
	return deps, nil
}

// readMetadata reads the Name and Version headers of a package's metadata file.
func readMetadata(fsys fs.FS, name string) (Dependency, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return Dependency{}, err
	}
	defer f.Close()
	var d Dependency
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
