// Package sandbox is the contract between the runner and the providers that isolate a job: a
// [Provider] creates one [Sandbox] per job, never reused; the sandbox runs a profile's fixed
// bootstrap, which reads the job's payload from standard input.
//
// The contract, which providertest checks for every provider:
//   - Create returns once the bootstrap is started and waiting on stdin, so that a sandbox can be
//     made ready before its job is known to be runnable, and its ID recorded before any of the
//     job's data enters it.
//   - Run copies stdin in, copies stdout and stderr out as they come, and returns when the
//     program and every process it started have ended. It enforces Spec.Timeout itself. When ctx
//     ends or a writer returns an error, it kills the whole sandbox and returns Exit.Killed.
//   - After Run, the sandbox keeps its /workspace until Destroy, also when Run ended the program
//     at its timeout or on a cancel; a provider's sandboxes read it as a [FileReader].
//   - Destroy kills what is left and returns nil only when nothing of the sandbox remains:
//     no process, no cgroup or container, no files.
//   - A sandbox has no network but loopback, no view of the host's files beyond its profile's
//     read-only root, and runs as an unprivileged user with no capabilities, under [Seccomp].
//   - A sandbox ends, every process of it, within 2 s of its worker's death, however the worker
//     died (exit, SIGKILL, OOM kill), and not only when a later worker reaps it.
package sandbox

import (
	"context"
	"errors"
	"io"
	"time"
)

// Profile is an immutable language definition: what to start and from which root.
type Profile struct {
	Name        string   `json:"name"`
	Interpreter []string `json:"interpreter"`     // argv of the bootstrap; the payload arrives on stdin
	Root        string   `json:"root,omitempty"`  // namespace provider: root file system; "" is the host's /usr
	Image       string   `json:"image,omitempty"` // docker provider: image reference
	Digest      string   `json:"digest,omitempty"`
	// Requires are files the root or image must hold for the profile to be offered (a
	// profile's libraries); a worker whose root or image lacks one does not serve the profile.
	Requires []string `json:"requires,omitempty"`
}

// Spec is what one sandbox is made for.
type Spec struct {
	JobID   string
	Attempt int64
	Worker  string
	Profile Profile

	Timeout        time.Duration // wall clock from the start of Run
	MemoryBytes    int64
	Pids           int64
	CPUs           float64 // 0 means no quota
	WorkspaceBytes int64   // size of the /workspace tmpfs
	TmpBytes       int64   // size of the /tmp tmpfs
}

// BaseEnv is the whole environment a sandbox's bootstrap starts with, on every provider. A job's
// own env is job data: it travels in the payload and the bootstrap adds it (see package profile),
// so it cannot act before the dispatch is recorded.
func BaseEnv() []string {
	return []string{"HOME=/workspace", "LANG=C.UTF-8", "PATH=/usr/local/bin:/usr/bin:/bin", "TMPDIR=/tmp"}
}

// Usage is what a provider measured; nil fields could not be measured.
type Usage struct {
	Wall   time.Duration
	CPU    *time.Duration
	MaxRSS *int64
}

// Exit is how a program ended.
type Exit struct {
	Code     int    // exit code, or 128+signal
	Signal   string // name of the signal that ended it, if any
	OOM      bool   // the memory limit killed a process
	TimedOut bool   // Spec.Timeout passed
	Killed   bool   // ctx ended or a writer failed
	Usage    Usage
}

// Provider makes sandboxes.
type Provider interface {
	Name() string
	Create(ctx context.Context, spec Spec) (Sandbox, error)
}

// Sandbox is one isolated run.
type Sandbox interface {
	ID() string
	Run(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) (Exit, error)
	Destroy(ctx context.Context) error
}

// ErrUnsupported is returned, wrapped, by a provider that cannot enforce what it was asked to on
// this host; a worker must refuse to start rather than run with weaker isolation.
var ErrUnsupported = errors.New("not enforceable on this host")

// DeniedSyscalls are refused in every sandbox, whatever the provider: kernel surfaces a sandboxed
// program never needs and that have carried most container escapes (keys, BPF, io_uring, mounts,
// namespaces, tracing, modules, kexec, clocks).
var DeniedSyscalls = []string{
	"keyctl", "add_key", "request_key", "bpf", "io_uring_setup", "io_uring_enter", "io_uring_register",
	"mount", "umount2", "unshare", "setns", "pivot_root", "chroot", "ptrace", "process_vm_readv",
	"process_vm_writev", "perf_event_open", "kexec_load", "kexec_file_load", "init_module",
	"finit_module", "delete_module", "reboot", "swapon", "swapoff", "acct", "userfaultfd",
	"open_by_handle_at", "name_to_handle_at", "fsopen", "fsmount", "fspick", "move_mount",
	"open_tree", "mount_setattr", "syslog", "settimeofday", "clock_settime", "clock_adjtime",
	"adjtimex", "quotactl", "lookup_dcookie", "vhangup", "iopl", "ioperm", "personality",
}
