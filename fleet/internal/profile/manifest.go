package profile

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/runfleet/runfleet/fleet/internal/bootstrap"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/job"
)

// Manifest is a language as data: one JSON file of a --langs directory (docs/protocol.md,
// "Languages"). Adding a language is a manifest and the packages it names in the root file
// system or image, no change to the worker. Its sandboxes run the generic bootstrap of package
// bootstrap.
type Manifest struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	// Aliases are other names a job may give: piston's language names, judge0's language ids.
	Aliases []string `json:"aliases,omitempty"`
	// Source is the file name the job's code is written to under /workspace.
	Source  string             `json:"source"`
	Compile *bootstrap.Compile `json:"compile,omitempty"`
	Run     []string           `json:"run"`
	Env     map[string]string  `json:"env,omitempty"`
	// Root and Image are the root file system (namespace provider) and image (docker, gvisor)
	// the language needs; empty is the worker's --rootfs or --image.
	Root  string `json:"root,omitempty"`
	Image string `json:"image,omitempty"`
	// Requires are files the root or image must hold (the toolchain) for the language to be offered.
	Requires []string      `json:"requires,omitempty"`
	Packages []string      `json:"packages,omitempty"`
	Test     *sandbox.Test `json:"test"`
}

// DecodeManifest reads one manifest and checks it; an unknown field is an error, so that a
// misspelt limit is not silently the default.
func DecodeManifest(r io.Reader) (Manifest, error) {
	var m Manifest
	d := json.NewDecoder(r)
	d.DisallowUnknownFields()
	if err := d.Decode(&m); err != nil {
		return m, err
	}
	if d.More() {
		return m, errors.New("data after the manifest")
	}
	return m, m.check()
}

func (m Manifest) check() error {
	switch {
	case !job.ValidQueue(m.Name):
		return fmt.Errorf("name %q: want %s", m.Name, "lower-case letters, digits and - _ .")
	case m.Source == "" || strings.ContainsAny(m.Source, "/\x00") || m.Source == "." || m.Source == "..":
		return fmt.Errorf("%s: source %q: want a file name", m.Name, m.Source)
	case len(m.Run) == 0 || m.Run[0] == "":
		return fmt.Errorf("%s: no run command", m.Name)
	case m.Test == nil || m.Test.Code == "":
		return fmt.Errorf("%s: no test program", m.Name)
	}
	if c := m.Compile; c != nil {
		if len(c.Argv) == 0 || c.Argv[0] == "" {
			return fmt.Errorf("%s: compile without argv", m.Name)
		}
		if c.TimeoutMS < 0 || c.MemoryBytes < 0 || c.OutputBytes < 0 {
			return fmt.Errorf("%s: negative compile limit", m.Name)
		}
	}
	for _, a := range m.Aliases {
		if a == "" || a == m.Name {
			return fmt.Errorf("%s: alias %q", m.Name, a)
		}
	}
	for k := range m.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("%s: env name %q", m.Name, k)
		}
	}
	return nil
}

// Profile is m's profile on root (namespace provider) or image (docker, gvisor), m's own when it
// names one. A root file system profile has its digest, over the manifest and the toolchain's
// files; an image profile gets the image's from the provider's Resolve, then [SealDigest].
func (m Manifest) Profile(root, image string) (sandbox.Profile, error) {
	env := make([]string, 0, len(m.Env))
	for k, v := range m.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	cmd, err := bootstrap.Command(bootstrap.Spec{Source: m.Source, Compile: m.Compile, Run: m.Run, Env: env})
	if err != nil {
		return sandbox.Profile{}, err
	}
	if m.Root != "" {
		root = m.Root
	}
	if m.Image != "" {
		image = m.Image
	}
	p := sandbox.Profile{Name: m.Name, Interpreter: cmd, Ready: bootstrap.Ready, Aliases: m.Aliases,
		Version: m.Version, Packages: m.Packages, Requires: m.Requires, Test: m.Test}
	if image != "" {
		p.Image = image
	} else {
		p.Root = root
	}
	if m.Compile != nil {
		p.CompileTimeout = m.Compile.Timeout()
	}
	if p.Image == "" {
		p.Digest = digest(p, toolchain(m))
	}
	return p, nil
}

// toolchain lists the files whose identity the digest covers: the compiler, the runner and what
// the manifest requires.
func toolchain(m Manifest) []string {
	files := slices.Clone(m.Requires)
	if m.Compile != nil && filepath.IsAbs(m.Compile.Argv[0]) {
		files = append(files, m.Compile.Argv[0])
	}
	if filepath.IsAbs(m.Run[0]) {
		files = append(files, m.Run[0])
	}
	return files
}

// digest hashes p's command (the manifest's spec), root and the size and time of each file
// (links followed as the host resolves them: a manifest names real files, not /etc/alternatives).
func digest(p sandbox.Profile, files []string) string {
	h := sha256.New()
	for _, a := range p.Interpreter {
		fmt.Fprintf(h, "%d:%s;", len(a), a)
	}
	fmt.Fprintf(h, "root:%s;version:%s;", p.Root, p.Version)
	for _, f := range files {
		if fi, err := os.Stat(filepath.Join(p.Root, f)); err == nil {
			fmt.Fprintf(h, "file:%s:%d:%d;", f, fi.Size(), fi.ModTime().UnixNano())
		}
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// SealDigest folds the command of a generic-bootstrap profile into its digest, which the Docker
// provider's Resolve set to the image's id: two manifests on one image, or one changed, differ.
func SealDigest(s Set) Set {
	out := Set{}
	for n, p := range s {
		if len(p.Interpreter) > 1 && p.Interpreter[0] == bootstrap.SelfExe && p.Interpreter[1] == bootstrap.Arg {
			p.Digest = digest(sandbox.Profile{Interpreter: p.Interpreter, Root: p.Digest, Version: p.Version}, nil)
		}
		out[n] = p
	}
	return out
}

// ShippedDir is where a root file system or image built by `make langs` carries the manifests
// of its languages: a worker on it serves them with no --langs.
const ShippedDir = "/usr/share/runfleet/langs"

// LoadDir adds the manifests of dir (its *.json files) to base, as [Add] does.
func LoadDir(dir string, base Set, root, image string) (s Set, skipped []string, err error) {
	files, err := ReadManifests(dir)
	if err != nil {
		return nil, nil, err
	}
	if files == nil {
		return nil, nil, fmt.Errorf("langs: %s: %w", dir, os.ErrNotExist)
	}
	s, skipped, err = Add(base, files, root, image)
	if err != nil {
		return nil, nil, fmt.Errorf("langs %s: %w", dir, err)
	}
	return s, skipped, nil
}

// The bounds of the manifests a root fs or image ships: a language's manifest is a few hundred
// bytes and `make langs` ships a few dozen; more is not read into the worker.
const (
	ShippedMaxBytes    = 1 << 20 // one manifest
	ShippedMaxTotal    = 4 << 20 // all of them
	ShippedMaxManifest = 1000
)

// ReadShipped reads the manifests root ships in [ShippedDir] ("" is the host's "/"), by name;
// nil, without error, when it holds no such directory. A root fs is its author's: a path is
// resolved inside it (a link out of it is an error), only regular *.json files are read (a link is
// not followed, as the Docker provider reads an image's), and past the Shipped bounds is an error.
func ReadShipped(root string) (map[string][]byte, error) {
	fsys := os.DirFS("/") // the host's own links are the operator's
	if root != "" {
		r, err := os.OpenRoot(root)
		if err != nil {
			return nil, fmt.Errorf("langs: %w", err)
		}
		defer r.Close()
		fsys = r.FS()
	}
	dir := strings.TrimPrefix(ShippedDir, "/")
	entries, err := fs.ReadDir(fsys, dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("langs: %w", err)
	}
	files := map[string][]byte{}
	var total int64
	for _, e := range entries {
		if !e.Type().IsRegular() || filepath.Ext(e.Name()) != ".json" {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			return nil, fmt.Errorf("langs: %w", err)
		}
		if fi.Size() > ShippedMaxBytes {
			return nil, fmt.Errorf("langs: %s/%s: %d bytes, more than a manifest", ShippedDir, e.Name(), fi.Size())
		}
		if total += fi.Size(); total > ShippedMaxTotal || len(files) == ShippedMaxManifest {
			return nil, fmt.Errorf("langs: %s: more than %d manifests or %d bytes of them", ShippedDir, ShippedMaxManifest, ShippedMaxTotal)
		}
		b, err := fs.ReadFile(fsys, dir+"/"+e.Name())
		if err != nil {
			return nil, fmt.Errorf("langs: %w", err)
		}
		files[e.Name()] = b
	}
	return files, nil
}

// ReadManifests reads the *.json files of dir by name; nil, without error, when dir does not exist.
func ReadManifests(dir string) (map[string][]byte, error) {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("langs: %w", err)
	}
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("langs: %w", err)
		}
		files[filepath.Base(path)] = b
	}
	return files, nil
}

// AddShipped is [Add] for the manifests a root file system or image ships in [ShippedDir]: each
// is a language of that root or image, so one that names another root or image is an error. The
// root's author does not choose what else of the host a sandbox sees (the host's whole "/"), nor
// an image the operator never named; only --langs, the operator's, may.
func AddShipped(base Set, manifests map[string][]byte, root, image string) (s Set, skipped []string, err error) {
	for name, b := range manifests {
		var m struct{ Root, Image string }
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", name, err)
		}
		if m.Root != "" || m.Image != "" {
			return nil, nil, fmt.Errorf("%s: names root %q, image %q: a shipped manifest is of the root or image that ships it", name, m.Root, m.Image)
		}
	}
	return Add(base, manifests, root, image)
}

// Add adds manifests (file name → JSON) to base, on root or image as [Manifest.Profile] says; a
// manifest's name replaces base's profile of that name. A root file system profile whose root
// lacks a required file is left out and named in skipped; an image profile is checked by the
// provider's Resolve.
func Add(base Set, manifests map[string][]byte, root, image string) (s Set, skipped []string, err error) {
	out := Set{}
	for n, p := range base {
		out[n] = p
	}
	names := make([]string, 0, len(manifests))
	for name := range manifests {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		m, err := DecodeManifest(bytes.NewReader(manifests[name]))
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", name, err)
		}
		p, err := m.Profile(root, image)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", name, err)
		}
		if p.Image == "" && !HasRequired(p) {
			skipped = append(skipped, m.Name)
			continue
		}
		out[m.Name] = p
	}
	if err := out.checkNames(); err != nil {
		return nil, nil, err
	}
	return out, skipped, nil
}

// checkNames refuses an alias that names two profiles.
func (s Set) checkNames() error {
	owner := map[string]string{}
	for _, n := range s.Names() {
		owner[n] = n
	}
	for _, n := range s.Names() {
		for _, a := range s[n].Aliases {
			if o, ok := owner[a]; ok && o != n {
				return fmt.Errorf("%q names both %s and %s", a, o, n)
			}
			owner[a] = n
		}
	}
	return nil
}
