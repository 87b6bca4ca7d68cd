// Package sandbox is the contract between the runner and the providers that isolate a job: a
// [Provider] creates [Sandbox]es, each used for one job and never reused; the sandbox runs a
// profile's fixed bootstrap, which reads the job's payload from standard input.
//
// A sandbox's life has two steps, so that it can be made before any job is known (package pool
// keeps some waiting):
//
//  1. Create makes it from a [Shape] alone (profile, tmpfs sizes, the limits it waits under):
//     root, namespaces or container, cgroup, the bootstrap started and waiting on stdin. Nothing
//     of any job is known to it.
//  2. Assign gives it to one job: the job's own [Limits] (memory, pids, CPU, timeout) replace the
//     waiting ones, and the job's identity is what the provider's [DispatchLog] records at Run.
//     Then the runner associates the sandbox with the job's lease, and Run sends the payload in.
//
// The contract, which internal/providers/providertest checks for every provider:
//   - Create returns once the bootstrap is started and waiting on stdin, so that a sandbox can be
//     made ready before its job is known, and its ID recorded before any of the job's data enters it.
//   - Assign may be called once, before Run; a Run without Assign or a second Run returns [ErrUsed],
//     so a sandbox never holds the data of two jobs. Assign returns [ErrEnded] when the sandbox
//     ended while it waited, so that a job is not run, and failed, in a dead sandbox.
//   - Run copies stdin in, copies stdout and stderr out as they come, and returns when the
//     program and every process it started have ended. It enforces Limits.Timeout itself. When ctx
//     ends or a writer returns an error, it kills the whole sandbox and returns Exit.Killed.
//   - After Run, the sandbox keeps its /workspace until Destroy, also when Run ended the program
//     at its timeout or on a cancel; a provider's sandboxes read it as a [FileReader].
//   - Destroy kills what is left and returns nil only when nothing of the sandbox remains:
//     no process, no cgroup or container, no files. It may be called on a sandbox never assigned.
//     One exception keeps a slow removal off the job's path: once the program has ended (every
//     process of it gone, its files read), a provider may return nil with the removal still
//     running, provided it finishes it before its Close returns, offers WaitRemovals(ctx), and
//     leaves anything it failed to remove to its reaper (the Docker provider does).
//   - A sandbox has no network but loopback, no view of the host's files beyond its profile's
//     read-only root, and runs as an unprivileged user with no capabilities, under [Seccomp].
//   - A sandbox ends, every process of it, within 2 s of its worker's death, however the worker
//     died (exit, SIGKILL, OOM kill), and not only when a later worker reaps it; a waiting sandbox
//     as much as a running one. A namespace sandbox's program forked from a zygote is killed at
//     once, but its parent was the worker: its supervisor exits once the host's init reaped it,
//     which takes what that init takes (about 1.5 s on this project's CI machine).
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
	// Ready, when set, is what the bootstrap writes to stdout once its imports are done and it
	// waits on stdin: Create returns only after reading it, so a waiting sandbox is one whose
	// interpreter has started, not one still starting. It is read before any job's data enters
	// the sandbox, so no job can forge it, and none of it reaches a job's output.
	Ready string `json:"ready,omitempty"`

	// Aliases are other names a job's language may give for the profile (piston's language
	// names, judge0's language ids); a settlement names the profile by Name.
	Aliases []string `json:"aliases,omitempty"`
	// Version is the language's version, as told to clients; Packages what the profile provides
	// beyond the language (libraries), as workers announce them.
	Version  string   `json:"version,omitempty"`
	Packages []string `json:"packages,omitempty"`
	// CompileTimeout is set for a profile whose bootstrap compiles the job's code before running
	// it (package bootstrap): the first line of its stdout then says whether the code compiled,
	// and the job's clock runs for its timeout plus this.
	CompileTimeout time.Duration `json:"-"`
	// Test is a program the profile runs and what it prints, checked when a worker starts.
	Test *Test `json:"test,omitempty"`
	// Zygote, when set, is the argv of an interpreter that imports what the profile's jobs share
	// and forks a bootstrap per sandbox (the namespace provider's zygote; see its package doc),
	// instead of Interpreter exec'd per sandbox. Never set from a --profiles file.
	Zygote []string `json:"-"`
}

// Test is a profile's test program: its source, its stdin, and its whole expected stdout.
type Test struct {
	Code   string `json:"code"`
	Stdin  string `json:"stdin,omitempty"`
	Stdout string `json:"stdout"`
}

// Shape is what a sandbox is created for, before any job is known: what cannot change once it
// exists, and the limits it waits under until [Sandbox.Assign] replaces them.
type Shape struct {
	Profile        Profile
	WorkspaceBytes int64 // size of the /workspace tmpfs
	TmpBytes       int64 // size of the /tmp tmpfs
	Limits         Limits
}

// Fits reports whether a sandbox made for s can serve a job that asks for t: the same profile and
// tmpfs sizes. Limits do not count: Assign applies the job's own.
func (s Shape) Fits(t Shape) bool {
	return s.Profile.Name == t.Profile.Name && s.Profile.Digest == t.Profile.Digest &&
		s.WorkspaceBytes == t.WorkspaceBytes && s.TmpBytes == t.TmpBytes
}

// Limits are what a sandbox's cgroup and clock enforce.
type Limits struct {
	Timeout     time.Duration // wall clock from the start of Run
	MemoryBytes int64
	Pids        int64
	CPUs        float64 // 0 means no quota
}

// Job is the job a sandbox is assigned to: its identity, which the dispatch log records, and its
// limits.
type Job struct {
	ID      string
	Attempt int64
	Worker  string
	Limits  Limits
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
	Create(ctx context.Context, shape Shape) (Sandbox, error)
}

// Sandbox is one isolated run.
type Sandbox interface {
	ID() string
	Assign(ctx context.Context, job Job) error
	Run(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) (Exit, error)
	Destroy(ctx context.Context) error
}

// ErrEnded is returned by Assign on a sandbox whose bootstrap ended while it waited (killed, a
// daemon restarted): no job's data entered it, and another sandbox can serve the job.
var ErrEnded = errors.New("sandbox ended before it was assigned")

// ErrUsed is returned by Assign or Run on a sandbox that was assigned or ran before, and by Run
// on one never assigned.
var ErrUsed = errors.New("sandbox already used or not assigned")

// ErrUnsupported is returned, wrapped, by a provider that cannot enforce what it was asked to on
// this host; a worker must refuse to start rather than run with weaker isolation.
var ErrUnsupported = errors.New("not enforceable on this host")

// DeniedSyscalls are refused in every sandbox, whatever the provider: kernel surfaces a sandboxed
// program never needs and that have carried most container escapes (keys, BPF, io_uring, mounts,
// namespaces, tracing, modules, kexec, clocks), and Linux AIO, whose contexts count against the
// host-wide fs.aio-max-nr that one sandbox could exhaust.
var DeniedSyscalls = []string{
	"keyctl", "add_key", "request_key", "bpf", "io_uring_setup", "io_uring_enter", "io_uring_register",
	"mount", "umount2", "unshare", "setns", "pivot_root", "chroot", "ptrace", "process_vm_readv",
	"process_vm_writev", "perf_event_open", "kexec_load", "kexec_file_load", "init_module",
	"finit_module", "delete_module", "reboot", "swapon", "swapoff", "acct", "userfaultfd",
	"open_by_handle_at", "name_to_handle_at", "fsopen", "fsmount", "fspick", "move_mount",
	"open_tree", "mount_setattr", "syslog", "settimeofday", "clock_settime", "clock_adjtime",
	"adjtimex", "quotactl", "lookup_dcookie", "vhangup", "iopl", "ioperm", "personality",
	"io_setup", "io_submit", "io_getevents", "io_cancel", "io_destroy", "io_pgetevents",
}
