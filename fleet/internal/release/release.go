package release

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/sumdb/dirhash"
	modzip "golang.org/x/mod/zip"
)

// Root is the root module's path; the nested modules' paths extend it with their directory.
const Root = "github.com/runfleet/runfleet"

// Module is one of the repository's modules.
type Module struct {
	Dir  string // relative to the repository root, "" for the root module
	Path string
}

// Modules are the repository's modules, each after every sibling it requires (see the package
// documentation: a module's hash covers the hashes it holds).
var Modules = []Module{
	{"", Root},
	{"fleet", Root + "/fleet"},
}

// Tag is the git tag of module m at version.
func (m Module) Tag(version string) string {
	if m.Dir == "" {
		return version
	}
	return m.Dir + "/" + version
}

// ErrNotLockstep means the modules require different versions of each other.
var ErrNotLockstep = errors.New("modules not in lockstep")

// Version is the version at which the modules under root require each other.
func Version(root string) (string, error) {
	var version string
	for _, m := range Modules {
		f, err := readGoMod(root, m)
		if err != nil {
			return "", err
		}
		for _, r := range f.Require {
			if !isSibling(r.Mod.Path) {
				continue
			}
			if version != "" && r.Mod.Version != version {
				return "", fmt.Errorf("%s requires %s, another %s: %w", m.Path, r.Mod, version, ErrNotLockstep)
			}
			version = r.Mod.Version
		}
	}
	if version == "" {
		return "", fmt.Errorf("no module under %s requires another", root)
	}
	return version, nil
}

// CheckVersion reports whether version can tag a release: vX.Y.Z, with no prerelease or build.
func CheckVersion(version string) error {
	if !semver.IsValid(version) || semver.Canonical(version) != version || semver.Prerelease(version) != "" ||
		strings.Count(version, ".") != 2 {
		return fmt.Errorf("version %q is not vX.Y.Z", version)
	}
	if semver.Major(version) != "v0" && semver.Major(version) != "v1" {
		return fmt.Errorf("version %s needs a /%s module path suffix", version, semver.Major(version))
	}
	return nil
}

// SetVersion rewrites the go.mod and go.sum files under root so that each module requires its
// siblings at version, with no replace directive, and holds their hashes.
func SetVersion(root, version string) error {
	if err := CheckVersion(version); err != nil {
		return err
	}
	files, err := listFiles(root)
	if err != nil {
		return err
	}
	// go.work is in the root module's zip: write it before any hash.
	required := make(map[string]bool) // by a sibling
	for _, m := range Modules {
		f, err := readGoMod(root, m)
		if err != nil {
			return err
		}
		for _, r := range f.Require {
			required[r.Mod.Path] = isSibling(r.Mod.Path)
		}
	}
	if err := setWorkReplace(root, version, required); err != nil {
		return err
	}
	sums := make(map[string][2]string) // module path → zip hash, go.mod hash
	for _, m := range Modules {
		f, err := readGoMod(root, m)
		if err != nil {
			return err
		}
		var requires []string
		for _, r := range f.Require {
			if !isSibling(r.Mod.Path) {
				continue
			}
			if _, ok := sums[r.Mod.Path]; !ok {
				return fmt.Errorf("%s requires %s, which Modules lists after it", m.Path, r.Mod.Path)
			}
			requires = append(requires, r.Mod.Path)
			if err := f.AddRequire(r.Mod.Path, version); err != nil {
				return fmt.Errorf("%s: %w", m.Path, err)
			}
		}
		for _, r := range slices.Clone(f.Replace) {
			if isSibling(r.Old.Path) {
				if err := f.DropReplace(r.Old.Path, r.Old.Version); err != nil {
					return fmt.Errorf("%s: %w", m.Path, err)
				}
			}
		}
		f.Cleanup()
		mod, err := f.Format()
		if err != nil {
			return fmt.Errorf("format %s go.mod: %w", m.Path, err)
		}
		if err := os.WriteFile(filepath.Join(root, m.Dir, "go.mod"), mod, 0o644); err != nil {
			return err
		}
		if err := writeGoSum(filepath.Join(root, m.Dir, "go.sum"), version, requires, sums); err != nil {
			return fmt.Errorf("%s: %w", m.Path, err)
		}
		zipSum, modSum, err := hashModule(root, files, m, version)
		if err != nil {
			return err
		}
		sums[m.Path] = [2]string{zipSum, modSum}
	}
	return nil
}

// setWorkReplace points go.work's replace directives for the siblings required at version at
// their directories: the go command reads the go.mod of every version a module requires, a
// workspace module's included, and only a proxy would serve a version before it is published.
func setWorkReplace(root, version string, required map[string]bool) error {
	name := filepath.Join(root, "go.work")
	data, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	f, err := modfile.ParseWork(name, data, nil)
	if err != nil {
		return err
	}
	for _, r := range slices.Clone(f.Replace) {
		if isSibling(r.Old.Path) {
			if err := f.DropReplace(r.Old.Path, r.Old.Version); err != nil {
				return fmt.Errorf("go.work: %w", err)
			}
		}
	}
	for _, m := range Modules {
		if required[m.Path] {
			if err := f.AddReplace(m.Path, version, "./"+m.Dir, ""); err != nil {
				return fmt.Errorf("go.work: %w", err)
			}
		}
	}
	f.Cleanup()
	return os.WriteFile(name, modfile.Format(f.Syntax), 0o644)
}

// WriteProxy writes a file-based module proxy (GOPROXY=file://dir) holding the modules under root
// at version: each module's .info, .mod, .zip and list.
func WriteProxy(root, dir, version string) error {
	files, err := listFiles(root)
	if err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return err
	}
	for _, m := range Modules {
		escaped, err := module.EscapePath(m.Path)
		if err != nil {
			return err
		}
		vdir := filepath.Join(dir, escaped, "@v")
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return err
		}
		mod, err := os.ReadFile(filepath.Join(root, m.Dir, "go.mod"))
		if err != nil {
			return err
		}
		if err := writeZip(filepath.Join(vdir, version+".zip"), root, files, m, version); err != nil {
			return err
		}
		for name, data := range map[string][]byte{
			version + ".mod":  mod,
			version + ".info": info,
			"list":            []byte(version + "\n"),
		} {
			if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

func isSibling(p string) bool {
	return slices.ContainsFunc(Modules, func(m Module) bool { return m.Path == p })
}

func readGoMod(root string, m Module) (*modfile.File, error) {
	name := filepath.Join(root, m.Dir, "go.mod")
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	f, err := modfile.Parse(name, data, nil)
	if err != nil {
		return nil, err
	}
	if f.Module == nil || f.Module.Mod.Path != m.Path {
		return nil, fmt.Errorf("%s: module is not %s", name, m.Path)
	}
	return f, nil
}

// writeGoSum replaces the siblings' lines in a go.sum with the hashes of the siblings required.
func writeGoSum(name, version string, required []string, sums map[string][2]string) error {
	data, err := os.ReadFile(name)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	lines := make(map[module.Version]string)
	for line := range strings.Lines(string(data)) {
		fields := strings.Fields(line)
		if len(fields) != 3 {
			return fmt.Errorf("%s: malformed line %q", name, line)
		}
		if isSibling(fields[0]) {
			continue
		}
		lines[module.Version{Path: fields[0], Version: fields[1]}] = fields[2]
	}
	for _, p := range required {
		lines[module.Version{Path: p, Version: version}] = sums[p][0]
		lines[module.Version{Path: p, Version: version + "/go.mod"}] = sums[p][1]
	}
	keys := slices.Collect(maps.Keys(lines))
	module.Sort(keys) // the order the go command writes
	var b bytes.Buffer
	for _, k := range keys {
		fmt.Fprintf(&b, "%s %s %s\n", k.Path, k.Version, lines[k])
	}
	if b.Len() == 0 {
		return nil
	}
	return os.WriteFile(name, b.Bytes(), 0o644)
}

// hashModule returns the h1 hashes of module m's zip and go.mod at version.
func hashModule(root string, files []string, m Module, version string) (zipSum, modSum string, err error) {
	tmp, err := os.CreateTemp("", "runfleet-release-*.zip")
	if err != nil {
		return "", "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	if err := writeZip(tmp.Name(), root, files, m, version); err != nil {
		return "", "", err
	}
	zipSum, err = dirhash.HashZip(tmp.Name(), dirhash.Hash1)
	if err != nil {
		return "", "", fmt.Errorf("hash %s: %w", m.Path, err)
	}
	mod, err := os.ReadFile(filepath.Join(root, m.Dir, "go.mod"))
	if err != nil {
		return "", "", err
	}
	// The go command hashes a go.mod alone as a one-file tree named go.mod.
	modSum, err = dirhash.Hash1([]string{"go.mod"}, func(string) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(mod)), nil
	})
	if err != nil {
		return "", "", fmt.Errorf("hash %s go.mod: %w", m.Path, err)
	}
	return zipSum, modSum, nil
}

// writeZip writes module m's zip at version to name. Files of nested modules are left out by
// modzip.Create, which sees their go.mod in the list.
func writeZip(name, root string, files []string, m Module, version string) error {
	var zfiles []modzip.File
	for _, f := range files {
		rel := f
		if m.Dir != "" {
			var ok bool
			if rel, ok = strings.CutPrefix(f, m.Dir+"/"); !ok {
				continue
			}
		}
		zfiles = append(zfiles, file{rel: rel, name: filepath.Join(root, filepath.FromSlash(f))})
	}
	out, err := os.Create(name)
	if err != nil {
		return err
	}
	err = modzip.Create(out, module.Version{Path: m.Path, Version: version}, zfiles)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("zip %s: %w", m.Path, err)
	}
	return nil
}

// listFiles lists the files under root that git tracks or would track, present in the working tree.
func listFiles(root string) ([]string, error) {
	var stderr bytes.Buffer
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files in %s: %w: %s", root, err, bytes.TrimSpace(stderr.Bytes()))
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f == "" {
			continue
		}
		if _, err := os.Lstat(filepath.Join(root, f)); errors.Is(err, os.ErrNotExist) {
			continue // deleted in the working tree
		}
		files = append(files, path.Clean(f))
	}
	slices.Sort(files)
	return slices.Compact(files), nil
}

// file is a file of the working tree as a module zip sees it.
type file struct {
	rel  string // slash-separated, relative to the module's root
	name string // on disk
}

func (f file) Path() string                 { return f.rel }
func (f file) Lstat() (os.FileInfo, error)  { return os.Lstat(f.name) }
func (f file) Open() (io.ReadCloser, error) { return os.Open(f.name) }

// GoEnv is the environment, built from the caller's, of a go command that sees this repository
// only through the module proxy at proxyDir, as a user outside it would: no workspace, the runfleet
// modules from proxyDir and never looked up in the checksum database (which does not know them),
// every other module from the caller's module cache, else from the caller's GOPROXY. modCache is
// the command's own module cache: the shared one keeps the first zip of a version for good, so a
// tree changed since, at the same version, would never be seen.
func GoEnv(ctx context.Context, proxyDir, modCache string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOPROXY", "GOMODCACHE").Output()
	if err != nil {
		return nil, fmt.Errorf("go env: %w", err)
	}
	upstream, shared, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	proxies := []string{"file://" + filepath.ToSlash(proxyDir)}
	if shared != "" {
		proxies = append(proxies, "file://"+filepath.ToSlash(filepath.Join(shared, "cache", "download")))
	}
	if upstream != "" {
		proxies = append(proxies, upstream)
	}
	set := map[string]string{
		"GOWORK":      "off",
		"GOFLAGS":     "-mod=mod -modcacherw -trimpath",
		"GOPROXY":     strings.Join(proxies, ","),
		"GOMODCACHE":  modCache,
		"GONOSUMDB":   Root,
		"GOPRIVATE":   "",
		"GONOPROXY":   "",
		"GOTOOLCHAIN": "local",
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok {
			env = append(env, kv)
		}
	}
	for k, v := range set {
		env = append(env, k+"="+v)
	}
	return env, nil
}
