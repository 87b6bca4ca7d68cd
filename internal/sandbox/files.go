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

// WalkFiles is [FileReader.ReadFiles] over the directory dir, for a provider that can open the
// sandbox's /workspace: no process may be left in the sandbox, so nothing can swap a checked
// directory for a link while it walks. Every open refuses to follow a link.
func WalkFiles(ctx context.Context, dir string, match func(string) bool, fn func(path string, size int64, r io.Reader) error) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open workspace: %w", err)
	}
	err = walkDir(ctx, os.NewFile(uintptr(fd), dir), "", match, fn)
	if errors.Is(err, fs.SkipAll) {
		return nil
	}
	return err
}

func walkDir(ctx context.Context, d *os.File, rel string, match func(string) bool, fn func(string, int64, io.Reader) error) error {
	defer d.Close()
	names, err := d.Readdirnames(-1)
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
			if err := walkDir(ctx, os.NewFile(uintptr(fd), p), p, match, fn); err != nil {
				return err
			}
		case unix.S_IFREG:
			if !match(p) {
				continue
			}
			if err := readFile(d, name, p, fn); err != nil {
				return err
			}
		}
	}
	return nil
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
