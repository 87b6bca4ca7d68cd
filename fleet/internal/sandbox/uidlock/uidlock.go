// Package uidlock hands out sandbox uids from a range, each under a lock: an exclusive flock on a
// file per uid in a directory every worker of the host shares, so that no two sandboxes on one
// host, of any worker process or provider, run under one uid at once. The kernel's per-uid limits
// (inotify instances, pipe buffer pages, RLIMIT_NPROC, RLIMIT_MSGQUEUE) are then each job's own.
//
// The lock is an open file description: it is released when the last descriptor of it closes,
// whichever process holds it, so a provider may hand a copy to a process that outlives it (the
// namespace provider's supervisor does).
package uidlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Defaults shared by every provider, so that they take uids from one range on a host.
const (
	DefaultBase = 200000
	DefaultN    = 1024
	DefaultDir  = "/run/runfleet/uids"
)

// Range is uids base to base+n-1, locked in dir.
type Range struct {
	base, n int
	dir     string

	mu   sync.Mutex
	held map[int]*os.File // uid → its lock, held by this process
}

// New returns the range of n uids from base, locked in dir, which must exist.
func New(base, n int, dir string) *Range {
	return &Range{base: base, n: n, dir: dir, held: map[int]*os.File{}}
}

// Take locks the first free uid of the range; the lock excludes other worker processes and other
// sandboxes of this one alike. Release gives it back.
func (r *Range) Take() (int, *os.File, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.n {
		uid := r.base + i
		if r.held[uid] != nil {
			continue
		}
		f, err := os.OpenFile(filepath.Join(r.dir, strconv.Itoa(uid)), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return 0, nil, fmt.Errorf("uid lock: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				continue
			}
			return 0, nil, fmt.Errorf("uid lock %d: %w", uid, err)
		}
		r.held[uid] = f
		return uid, f, nil
	}
	return 0, nil, fmt.Errorf("all %d sandbox uids from %d in use on this host", r.n, r.base)
}

// Release closes this process's lock of uid: the uid is free once no other copy of it is open.
func (r *Range) Release(uid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f := r.held[uid]; f != nil {
		f.Close()
	}
	delete(r.held, uid)
}
