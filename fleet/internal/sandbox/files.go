package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"

	"golang.org/x/sys/unix"
)

// FileReader is a sandbox whose /workspace can be read after Run returned and before Destroy:
// the program and every process it started have ended, and the files they left are still there.
type FileReader interface {
	// ReadFiles walks /workspace in path order (names sorted within each directory, a
	// directory's entries where its name sorts) and calls fn with each regular file whose
	// slash-separated path relative to /workspace match accepts. It never follows a symbolic link,
	// never descends into one, and skips every other kind of file. fn reads from r at most what
	// it wants; returning [fs.SkipAll] ends the walk without an error.
	ReadFiles(ctx context.Context, match func(path string) bool, fn func(path string, size int64, r io.Reader) error) error
}

// ErrWorkspaceGone is returned, wrapped, by ReadFiles when the sandbox no longer holds its
// /workspace: its supervisor was killed (a kill that could not wait, a failure) or it was destroyed.
var ErrWorkspaceGone = errors.New("sandbox workspace gone")

// ErrWalkBound is returned, wrapped, by [WalkFiles] when /workspace is deeper than MaxWalkDepth
// directories or holds more than MaxWalkEntries entries: the walk ends there, after every file
// before that point in path order.
var ErrWalkBound = errors.New("workspace walk bound reached")

// A job decides its workspace's shape (G11): the bounds keep a walk from holding a descriptor
// per level of a deep tree or reading millions of empty files.
const (
	MaxWalkDepth   = 64
	MaxWalkEntries = 100_000
)

// WalkFiles is [FileReader.ReadFiles] over the directory dir, for a provider that can open the
// sandbox's /workspace: no process may be left in the sandbox, so nothing can swap a checked
// directory for a link while it walks. Every open refuses to follow a link. It stops at
// [ErrWalkBound].
func WalkFiles(ctx context.Context, dir string, match func(string) bool, fn func(path string, size int64, r io.Reader) error) error {
	d, err := OpenWorkspace(dir)
	if err != nil {
		return err
	}
	return WalkOpened(ctx, d, match, fn)
}

// OpenWorkspace opens dir as [WalkFiles] does, for a provider that must check, after the open,
// that dir still named its sandbox (a path through /proc/PID/ names whatever holds PID now).
func OpenWorkspace(dir string) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open workspace: %w", err)
	}
	return os.NewFile(uintptr(fd), dir), nil
}

// WalkOpened is [WalkFiles] over the directory d opened by [OpenWorkspace]; it closes d.
func WalkOpened(ctx context.Context, d *os.File, match func(string) bool, fn func(path string, size int64, r io.Reader) error) error {
	w := &walker{match: match, fn: fn, left: MaxWalkEntries}
	err := w.dir(ctx, d, "", 0)
	if errors.Is(err, fs.SkipAll) {
		return nil
	}
	return err
}

type walker struct {
	match func(string) bool
	fn    func(string, int64, io.Reader) error
	left  int // entries the walk may still list
}

func (w *walker) dir(ctx context.Context, d *os.File, rel string, depth int) error {
	defer d.Close()
	if depth > MaxWalkDepth {
		return fmt.Errorf("%s: more than %d directories deep: %w", rel, MaxWalkDepth, ErrWalkBound)
	}
	names, err := w.list(d)
	if err != nil {
		return fmt.Errorf("list %s: %w", cmpRel(rel), err)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		p := path.Join(rel, name)
		var st unix.Stat_t
		if err := unix.Fstatat(int(d.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("stat %s: %w", p, err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			fd, err := unix.Openat(int(d.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("open %s: %w", p, err)
			}
			if err := w.dir(ctx, os.NewFile(uintptr(fd), p), p, depth+1); err != nil {
				return err
			}
		case unix.S_IFREG:
			if !w.match(p) {
				continue
			}
			if err := readFile(d, name, p, w.fn); err != nil {
				return err
			}
		}
	}
	return nil
}

// list returns d's names, reading no more of them than the walk may still take.
func (w *walker) list(d *os.File) ([]string, error) {
	var names []string
	for {
		batch, err := d.Readdirnames(min(w.left+1, 1024))
		names = append(names, batch...)
		w.left -= len(batch)
		if w.left < 0 {
			return nil, fmt.Errorf("more than %d entries: %w", MaxWalkEntries, ErrWalkBound)
		}
		if errors.Is(err, io.EOF) {
			return names, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func readFile(d *os.File, name, p string, fn func(string, int64, io.Reader) error) error {
	// O_NONBLOCK: a FIFO put in place of the file cannot block the open.
	fd, err := unix.Openat(int(d.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", p, err)
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat %s: %w", p, err)
	}
	if !fi.Mode().IsRegular() {
		return nil
	}
	return fn(p, fi.Size(), io.LimitReader(f, fi.Size()))
}

func cmpRel(rel string) string {
	if rel == "" {
		return "/workspace"
	}
	return rel
}
