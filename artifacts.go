package runfleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/runfleet/runfleet/job"
)

// ErrNoArtifact is returned by [Client.OpenArtifact] for a path the job's settlement does not list.
var ErrNoArtifact = errors.New("no such artifact")

// Artifacts returns the files job id's settlement lists as kept from its outputs: nil when the
// request named no outputs, empty when nothing matched. It returns [ErrNoSettlement] while the
// job is not settled: before that, nothing says which stored objects will stand.
func (c *Client) Artifacts(ctx context.Context, id string) ([]job.Artifact, error) {
	st, err := c.Settlement(ctx, id)
	if err != nil {
		return nil, err
	}
	return st.Artifacts, nil
}

// OpenArtifact opens the artifact at path (relative to the job's /workspace) of settled job id.
// The caller closes it; reading it to its end checks the object store's digest. The job chose
// path: never join it to a local directory unchecked ([Client.SaveArtifacts] does it safely).
func (c *Client) OpenArtifact(ctx context.Context, id, path string) (io.ReadCloser, error) {
	arts, err := c.Artifacts(ctx, id)
	if err != nil {
		return nil, err
	}
	for _, a := range arts {
		if a.Path != path {
			continue
		}
		store, err := c.js.ObjectStore(ctx, c.subjects.ArtifactsBucket())
		if err != nil {
			return nil, &JobError{ID: id, Err: fmt.Errorf("artifact %q: %w", path, err)}
		}
		r, err := store.Get(ctx, a.Object)
		if err != nil {
			return nil, &JobError{ID: id, Err: fmt.Errorf("artifact %q: %w", path, err)}
		}
		return r, nil
	}
	return nil, &JobError{ID: id, Err: fmt.Errorf("artifact %q: %w", path, ErrNoArtifact)}
}

// ErrArtifactExists is returned by [Client.SaveArtifacts] when a file it would write is already
// there and [SaveOptions.Overwrite] is not set; nothing is written then.
var ErrArtifactExists = errors.New("file exists")

// ErrUnsafeArtifactPath is returned by [Client.SaveArtifacts] for a path it never writes: one that
// leaves the directory, or has a ".git" element (a repository's config runs commands).
var ErrUnsafeArtifactPath = errors.New("unsafe artifact path")

// SaveOptions are the settings of [Client.SaveArtifacts]. The zero value is fine.
type SaveOptions struct {
	Overwrite bool               // replace files that already exist under the directory
	OnSave    func(job.Artifact) // called after each file is written
}

// SaveArtifacts writes every artifact of settled job id under dir, creating dir when it is
// missing, and returns the list it wrote. The job chose the names, so every write is confined to
// dir with [os.Root] (no "..", absolute path or symlink leads out), a path with a ".git" element
// is refused, and files are written mode 0644 whatever the job's mode was. Before anything is
// written every name is checked: a file that exists fails the whole call with
// [ErrArtifactExists] unless opts.Overwrite. A file that cannot be saved (an unsafe path, a
// failed read) does not stop the others; the error names the first. Print the paths quoted
// (%q): a name may hold terminal escapes.
func (c *Client) SaveArtifacts(ctx context.Context, id, dir string, opts *SaveOptions) ([]job.Artifact, error) {
	arts, err := c.Artifacts(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, &JobError{ID: id, Err: err}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, &JobError{ID: id, Err: err}
	}
	defer root.Close()
	// open reads one artifact unwrapped: the whole call's error names the job once.
	open := func(p string) (io.ReadCloser, error) {
		r, err := c.OpenArtifact(ctx, id, p)
		if je, ok := errors.AsType[*JobError](err); ok {
			return nil, je.Err
		}
		return r, err
	}
	if err := saveAll(root, arts, open, cmp.Or(opts, &SaveOptions{})); err != nil {
		return arts, &JobError{ID: id, Err: err}
	}
	return arts, nil
}

// saveAll writes arts under root, reading each with open; see [Client.SaveArtifacts].
func saveAll(root *os.Root, arts []job.Artifact, open func(path string) (io.ReadCloser, error), opts *SaveOptions) error {
	var exist []string
	for _, a := range arts {
		if safePath(a.Path) != nil {
			continue
		}
		if _, err := root.Lstat(filepath.FromSlash(a.Path)); err == nil {
			exist = append(exist, a.Path)
		}
	}
	if len(exist) > 0 && !opts.Overwrite {
		return fmt.Errorf("%q%s in %s: %w", exist[0], more(len(exist)-1), root.Name(), ErrArtifactExists)
	}
	var failed []error
	for _, a := range arts {
		err := safePath(a.Path)
		if err == nil {
			err = saveOne(root, a.Path, open, opts.Overwrite)
		}
		if err != nil {
			failed = append(failed, err)
			continue
		}
		if opts.OnSave != nil {
			opts.OnSave(a)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("%w%s", failed[0], more(len(failed)-1))
}

func more(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (and %d more)", n)
}

// safePath refuses a path SaveArtifacts never writes.
func safePath(p string) error {
	if !filepath.IsLocal(filepath.FromSlash(p)) {
		return fmt.Errorf("%q: %w: not inside the directory", p, ErrUnsafeArtifactPath)
	}
	for elem := range strings.SplitSeq(p, "/") {
		if strings.EqualFold(elem, ".git") {
			return fmt.Errorf("%q: %w: a .git directory", p, ErrUnsafeArtifactPath)
		}
	}
	return nil
}

func saveOne(root *os.Root, p string, open func(string) (io.ReadCloser, error), overwrite bool) error {
	local := filepath.FromSlash(p)
	if err := mkdirAll(root, filepath.Dir(local)); err != nil {
		return err
	}
	r, err := open(p)
	if err != nil {
		return err
	}
	defer r.Close()
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if overwrite {
		flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	f, err := root.OpenFile(local, flags, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%q in %s: %w", p, root.Name(), ErrArtifactExists)
	}
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		_ = root.Remove(local) // a partial file would pass for the artifact
		return fmt.Errorf("download %q: %w", p, err)
	}
	return f.Close()
}

// mkdirAll is os.Root.MkdirAll, which needs Go 1.25.
func mkdirAll(root *os.Root, dir string) error {
	if dir == "." {
		return nil
	}
	if err := mkdirAll(root, filepath.Dir(dir)); err != nil {
		return err
	}
	if err := root.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}
