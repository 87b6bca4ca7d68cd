// Package supervise installs the small programs a sandbox starts before its job: an
// execute-only copy, named by its content, in a directory only root can write, checked before
// each use (see [PrivateCopy]). The sandboxes' supervisor and container init is built
// from internal/cmd/sandboxinit.
package supervise

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// DefaultDir is where a worker keeps the private copies of the programs it embeds: under /run,
// which only root may write.
const DefaultDir = "/run/runfleet/supervise"

// PrivateCopyFile is [PrivateCopy] of the file at path, streamed, never read whole: a worker's
// binary is tens of MiB, which a worker's heap would otherwise hold until the scavenger returns it.
func PrivateCopyFile(path, dir string) (string, error) {
	src, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer src.Close()
	return PrivateCopy(src, dir)
}

// PrivateCopy copies the executable src into dir, named by its content, execute-only: a sandbox's
// user may run it (a container's init) but not read it. Workers of one host share
// the copy; each writes it whole under a temporary name first. Every component of dir must be a
// real directory owned by this process's user and writable by no one else (a root-owned sticky
// ancestor such as /tmp excepted), so that no other user can make, swap or write the copy; an
// existing copy is used only when it is such a file and its whole content hashes to its name,
// and is replaced otherwise.
func PrivateCopy(src io.ReadSeeker, dir string) (string, error) {
	sum, err := hashOf(src)
	if err != nil {
		return "", err
	}
	if err := secureDir(dir); err != nil {
		return "", err
	}
	dst := filepath.Join(dir, "init-"+sum[:16])
	if ok, err := verifiedCopy(dst, sum); err != nil || ok {
		return dst, err
	}
	if _, err := src.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, "init-*.tmp")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	_, werr := io.Copy(tmp, src)
	if err := errors.Join(werr, tmp.Chmod(0o711), tmp.Close()); err != nil {
		return "", err
	}
	// A rename replaces whatever was at dst (a symlink, a foreign file), never writes through it.
	return dst, os.Rename(tmp.Name(), dst)
}

func hashOf(r io.Reader) (string, error) {
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// verifiedCopy reports whether dst is a regular file owned by this process's user, mode 0711,
// whose content hashes to sum. A missing or different dst is false, to be replaced.
func verifiedCopy(dst, sum string) (bool, error) {
	f, err := os.OpenFile(dst, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return false, nil // missing, a symlink, or unreadable: written anew
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o711 || !ownedBySelf(fi) {
		return false, nil
	}
	got, err := hashOf(f)
	if err != nil {
		return false, err
	}
	return got == sum, nil
}

// secureDir makes dir and any missing parent (mode 0711) and checks every component of it: a
// directory, not a symlink, owned by this process's user, writable by no one else. A root-owned
// sticky directory (/tmp) may be an ancestor, since no one else can rename or remove what root
// made in it; dir itself may not be one.
func secureDir(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	path := "/"
	parts := strings.Split(strings.TrimPrefix(dir, "/"), "/")
	for i, part := range append([]string{""}, parts...) {
		path = filepath.Join(path, part)
		fi, err := os.Lstat(path)
		if errors.Is(err, fs.ErrNotExist) {
			if err := os.Mkdir(path, 0o711); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			fi, err = os.Lstat(path)
		}
		if err != nil {
			return err
		}
		switch st := fi.Sys().(*syscall.Stat_t); {
		case fi.Mode()&fs.ModeSymlink != 0:
			return fmt.Errorf("state directory %s: %s is a symlink", dir, path)
		case !fi.IsDir():
			return fmt.Errorf("state directory %s: %s is not a directory", dir, path)
		case fi.Mode().Perm()&0o022 != 0 && !(fi.Mode()&fs.ModeSticky != 0 && st.Uid == 0 && i < len(parts)):
			return fmt.Errorf("state directory %s: %s is writable by group or others (mode %v)", dir, path, fi.Mode())
		case !ownedBySelf(fi) && st.Uid != 0:
			return fmt.Errorf("state directory %s: %s is owned by uid %d", dir, path, st.Uid)
		case i == len(parts) && !ownedBySelf(fi):
			return fmt.Errorf("state directory %s: owned by uid %d, not this process's", dir, st.Uid)
		}
	}
	return nil
}

func ownedBySelf(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}
