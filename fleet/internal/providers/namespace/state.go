package namespace

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// checkStateDir refuses a directory that anyone but root made or can change: the provider keeps
// its uid locks and mount points there, and a directory another user controls could hand it a
// lock held elsewhere or a symlink to follow.
func checkStateDir(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if err := rootOwned(dir, fi, false); err != nil {
		return err
	}
	// Each directory above, as named and as resolved, must keep others from renaming dir away or
	// pointing the path elsewhere: root's, and writable by others only when sticky (/tmp).
	real, err := filepath.EvalSymlinks(filepath.Dir(dir))
	if err != nil {
		return err
	}
	for _, p := range []string{filepath.Dir(dir), real} {
		if err := rootOwnedPath(p); err != nil {
			return err
		}
	}
	return nil
}

// rootOwnedPath checks p and every directory above it; a symbolic link on the way must be root's.
func rootOwnedPath(p string) error {
	for ; ; p = filepath.Dir(p) {
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != 0 {
				return fmt.Errorf("%s is owned by uid %d, not root", p, uid)
			}
		} else if err := rootOwned(p, fi, true); err != nil {
			return err
		}
		if p == "/" {
			return nil
		}
	}
}

func rootOwned(path string, fi os.FileInfo, stickyOK bool) error {
	st := fi.Sys().(*syscall.Stat_t)
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("%s is a symbolic link", path)
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", path)
	case st.Uid != 0:
		return fmt.Errorf("%s is owned by uid %d, not root", path, st.Uid)
	case fi.Mode().Perm()&0o022 != 0 && !(stickyOK && fi.Mode()&os.ModeSticky != 0):
		return fmt.Errorf("%s is writable by others (mode %o)", path, fi.Mode().Perm())
	}
	return nil
}

// checkIDRange refuses sandbox ids [first, first+n) that the host gives to someone: a user of
// passwd, a group of group (a sandbox's gid is its uid), or subordinate ids of subuid and subgid.
// A file that does not exist gives nothing.
func checkIDRange(etc string, first, n int) error {
	last := first + n - 1
	for _, f := range []struct {
		name string
		sub  bool // name:start:count, else name:x:id:...
	}{{"passwd", false}, {"group", false}, {"subuid", true}, {"subgid", true}} {
		path := filepath.Join(etc, f.name)
		b, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		for line := range strings.Lines(string(b)) {
			fields := strings.Split(strings.TrimSpace(line), ":")
			lo, hi, ok := idsOf(fields, f.sub)
			if ok && lo <= last && first <= hi {
				return fmt.Errorf("sandbox uids %d-%d overlap %s: %s has %d-%d", first, last, path, fields[0], lo, hi)
			}
		}
	}
	return nil
}

func idsOf(fields []string, sub bool) (lo, hi int, ok bool) {
	if sub {
		if len(fields) < 3 {
			return 0, 0, false
		}
		start, err1 := strconv.Atoi(fields[1])
		count, err2 := strconv.Atoi(fields[2])
		return start, start + count - 1, err1 == nil && err2 == nil && count > 0
	}
	if len(fields) < 3 {
		return 0, 0, false
	}
	id, err := strconv.Atoi(fields[2])
	return id, id, err == nil
}
