// Package profile defines the languages a worker runs: the built-in python3 and nodejs, more
// from a --profiles file, and languages as data from the manifests of a --langs directory
// ([Manifest]). A profile is immutable; its digest names exactly what ran and is copied
// into every settlement.
package profile

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"

	"github.com/runfleet/runfleet/fleet/internal/bootstrap"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/job"
)

var (
	//go:embed bootstrap/python3.py
	pythonBootstrap string
	//go:embed bootstrap/nodejs.js
	nodeBootstrap string
	//go:embed bootstrap/python3_zygote.py
	pythonZygote string
)

// Ready is what the bootstraps write to stdout once they wait for the payload
// (sandbox.Profile.Ready).
const Ready = bootstrap.Ready

// Set is the profiles a worker serves, by name.
type Set map[string]sandbox.Profile

// Has reports whether name is a profile of s or an alias of one.
func (s Set) Has(name string) bool { _, ok := s.Lookup(name); return ok }

// Lookup returns the profile name or an alias names.
func (s Set) Lookup(name string) (sandbox.Profile, bool) {
	if p, ok := s[name]; ok {
		return p, true
	}
	for _, p := range s {
		if slices.Contains(p.Aliases, name) {
			return p, true
		}
	}
	return sandbox.Profile{}, false
}

// Names lists the profiles of s in order.
func (s Set) Names() []string {
	names := make([]string, 0, len(s))
	for n := range s {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Builtin returns python3 and nodejs, and [DataProfile] unless root lacks its packages. With root
// "", they run the host's /usr/bin interpreters (namespace provider); image names the sandbox
// image (Docker provider), whose interpreters are at the same paths.
func Builtin(root, image string) Set {
	s := Set{
		"python3": {Name: "python3", Interpreter: []string{"/usr/bin/python3", "-I", "-c", pythonBootstrap}, Root: root, Image: image, Ready: Ready,
			Aliases: []string{"python", "71"},
			Zygote:  []string{"/usr/bin/python3", "-I", "-c", pythonZygote, pythonBootstrap}},
		"nodejs": {Name: "nodejs", Interpreter: []string{"/usr/bin/node", "-e", nodeBootstrap}, Root: root, Image: image, Ready: Ready,
			Aliases: []string{"javascript", "node", "js", "63"}},
	}
	data := sandbox.Profile{Name: DataProfile, Root: root, Image: image, Requires: DataRequires, Ready: Ready,
		Interpreter: []string{"/usr/bin/env", "MPLBACKEND=Agg", "/usr/bin/python3", "-I", "-c", pythonBootstrap},
		Zygote:      []string{"/usr/bin/env", "MPLBACKEND=Agg", "/usr/bin/python3", "-I", "-c", pythonZygote, pythonBootstrap, "numpy", "pandas", "matplotlib.pyplot"}}
	// A root file system is checked here; an image by the Docker provider's Resolve.
	if image != "" || HasRequired(data) {
		s[DataProfile] = data
	}
	if image == "" {
		for n, p := range s {
			s[n] = WithDigest(p)
		}
	}
	return s
}

// DataProfile is python3 with numpy, pandas and matplotlib (drawing to files: MPLBACKEND=Agg is
// the profile's, not the job's). A worker offers it only when its root file system or image
// holds the three packages (Debian's python3-numpy, python3-pandas, python3-matplotlib): see
// DataRequires.
const DataProfile = "python3-data"

// DataRequires are the files [DataProfile] needs in its root or image.
var DataRequires = []string{
	"/usr/lib/python3/dist-packages/numpy/__init__.py",
	"/usr/lib/python3/dist-packages/pandas/__init__.py",
	"/usr/lib/python3/dist-packages/matplotlib/__init__.py",
}

// HasRequired reports whether p's root file system holds every file p requires.
func HasRequired(p sandbox.Profile) bool {
	for _, f := range p.Requires {
		if _, err := os.Stat(filepath.Join(p.Root, f)); err != nil {
			return false
		}
	}
	return true
}

// WithDigest fills p.Digest of a root-file-system profile when it is empty (a Docker profile's
// digest is its image id, pinned by the provider). The digest covers the interpreter command, the zygote's and, for the host, the interpreter binary,
// so that a changed interpreter shows as a changed digest.
func WithDigest(p sandbox.Profile) sandbox.Profile {
	if p.Digest != "" {
		return p
	}
	h := sha256.New()
	for _, a := range p.Interpreter {
		fmt.Fprintf(h, "%d:%s;", len(a), a)
	}
	for _, a := range p.Zygote {
		fmt.Fprintf(h, "z%d:%s;", len(a), a)
	}
	fmt.Fprintf(h, "root:%s;", p.Root)
	if len(p.Interpreter) > 0 {
		if fi, err := os.Stat(filepath.Join(p.Root, p.Interpreter[0])); err == nil {
			fmt.Fprintf(h, "bin:%d:%d;", fi.Size(), fi.ModTime().UnixNano())
		}
	}
	p.Digest = "sha256:" + hex.EncodeToString(h.Sum(nil))
	return p
}

// file is the --profiles file: a JSON list of profiles. "bootstrap" names a built-in bootstrap
// ("python3" or "nodejs") appended to interpreter, so a file need not repeat it.
type file []struct {
	sandbox.Profile
	Bootstrap string `json:"bootstrap,omitempty"`
}

// Load reads a --profiles file and adds its profiles to base; a name in the file replaces base's.
func Load(path string, base Set) (Set, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("profiles: %w", err)
	}
	var f file
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("profiles %s: %w", path, err)
	}
	out := Set{}
	for n, p := range base {
		out[n] = p
	}
	for i, e := range f {
		p := e.Profile
		if !job.ValidQueue(p.Name) {
			return nil, fmt.Errorf("profiles %s: entry %d: name %q", path, i, p.Name)
		}
		switch e.Bootstrap {
		case "":
		case "python3":
			p.Interpreter, p.Ready = append(p.Interpreter, "-I", "-c", pythonBootstrap), Ready
		case "nodejs":
			p.Interpreter, p.Ready = append(p.Interpreter, "-e", nodeBootstrap), Ready
		default:
			return nil, fmt.Errorf("profiles %s: %s: unknown bootstrap %q", path, p.Name, e.Bootstrap)
		}
		if len(p.Interpreter) == 0 {
			return nil, fmt.Errorf("profiles %s: %s: no interpreter", path, p.Name)
		}
		if p.Image == "" {
			if !HasRequired(p) {
				return nil, fmt.Errorf("profiles %s: %s: root %q lacks a file of requires %q", path, p.Name, p.Root, p.Requires)
			}
			p = WithDigest(p)
		}
		out[p.Name] = p
	}
	if err := out.checkNames(); err != nil {
		return nil, fmt.Errorf("profiles %s: %w", path, err)
	}
	return out, nil
}

// Payload is what the bootstrap reads from stdin, in front of the job's own stdin.
func Payload(req job.Request) ([]byte, error) {
	body, err := json.Marshal(struct {
		Preload string            `json:"preload"`
		Code    string            `json:"code"`
		Args    []string          `json:"args,omitempty"`
		Files   []job.File        `json:"files,omitempty"`
		Env     map[string]string `json:"env,omitempty"`
	}{req.Preload, req.Code, req.Args, req.Files, req.Env})
	if err != nil {
		return nil, err
	}
	out := append([]byte("runfleet1 "+strconv.Itoa(len(body))+"\n"), body...)
	return append(out, req.Stdin...), nil
}
