// Package containerinit is the half of the Docker provider that runs inside a container: its init
// (pid 1, which starts the program as the sandbox user and reports how it ended) and the collector
// of its files. It is its own package so that the small static sandbox init
// (internal/cmd/sandboxinit) carries none of the Docker client.
package containerinit

import (
	"archive/tar"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/runfleet/runfleet/fleet/internal/sandbox"
)

// Path is where a container finds its init's executable (the worker's small sandbox
// supervisor, or the worker's own executable), an execute-only copy bind-mounted read-only.
const Path = "/.runfleet/init"

// Env is the init's own environment, which the program does not inherit. GORACE: a
// race-enabled build (tests) would otherwise sleep a second in its exit.
var Env = []string{"GOMAXPROCS=1", "GORACE=atexit_sleep_ms=0"}

// EnvUser names, in the init's environment, the uid:gid the program runs as.
const EnvUser = "RUNFLEET_INIT_USER"

// Caps are the capabilities a container starts with (all others dropped), for its init: it
// drops CAP_SETPCAP after emptying the bounding set, and keeps CAP_KILL (to end the program's
// processes, of another uid) and CAP_SETUID/CAP_SETGID (to start the program as its user).
var Caps = []string{"KILL", "SETUID", "SETGID", "SETPCAP"}

// CollectArg, after Path, makes the init binary the collector.
const CollectArg = "--runfleet-collect"

// NprocArg, after Path and before a count, makes the init binary set RLIMIT_NPROC of every
// process of its user to that count (see docker.RuntimeTraits.NprocFromShape).
const NprocArg = "--runfleet-nproc"

// Frames of a container's stdin: a kind byte, a big-endian uint32 length, the data.
const (
	FrameData  = 'D' // bytes for the program's stdin
	FrameClose = 'E' // the program's stdin ends
	FrameHold  = 'H' // a marker: when the program ends, write it and the status, and keep the container
)

// Init runs the container init when this process was started as one, and never returns then.
// The worker's main calls it first, and test binaries in TestMain.
//
// The init is pid 1 of the container. It starts the program, hands it the stdin frames the worker
// sends, and ends the container (every process of it) when its own stdin reaches EOF: the daemon
// closes it when the worker's attach connection closes, which the kernel does when the worker
// dies in any way. When the program ends it kills every other process, writes the hold frame's
// marker on stderr, then the marker and the program's wait status on stdout, and waits for that
// EOF; SIGUSR1 ends the program early. Started with CollectArg, it is the collector of
// the provider's ReadFiles.
func Init() {
	if len(os.Args) < 2 || os.Args[0] != Path {
		return
	}
	switch os.Args[1] {
	case CollectArg:
		if err := programUserOnly(); err != nil {
			fmt.Fprintln(os.Stderr, "collect:", err)
			os.Exit(1)
		}
		os.Exit(collect(os.Stdout, os.Stderr))
	case NprocArg:
		err := programUserOnly()
		if err == nil {
			err = limitProcs(os.Args[2:])
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "nproc:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code, err := runInit(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox init:", err)
	}
	os.Exit(code)
}

func runInit(argv []string) (int, error) {
	// The program is forked from this thread, whose bounding set dropCaps empties.
	runtime.LockOSThread()
	// Every catchable signal but the worker's SIGUSR1 is caught and dropped: Go's default handlers
	// would end pid 1, and with it the container, leaving the job's outcome unknown. The program
	// runs as another uid and cannot signal the init at all; this holds even if it could. Caught,
	// not ignored: an ignored signal stays ignored across exec, and the program must start with
	// every signal at its default.
	sandbox.UnignoreInherited()
	dropped := make(chan os.Signal, 16)
	signal.Notify(dropped, droppedSignals()...)
	go func() {
		for range dropped {
		}
	}()
	cred, err := programUser()
	if err != nil {
		return 1, err
	}
	if err := dropCaps(); err != nil {
		return 1, err
	}
	// Not dumpable: the program cannot read the init's memory or environment.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return 1, fmt.Errorf("dumpable: %w", err)
	}
	sandbox.HoldThreads(sandbox.SupervisorTasks)
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return 127, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return 1, err
	}
	env := slices.DeleteFunc(os.Environ(), func(v string) bool {
		return slices.Contains(Env, v) || strings.HasPrefix(v, EnvUser+"=")
	})
	progErr, err := keepStderrForProgram()
	if err != nil {
		return 1, err
	}
	// The init keeps its copy of the container's stderr only to end it with the marker.
	errOut := os.NewFile(uintptr(progErr), "stderr")
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{Env: env, Files: []uintptr{r.Fd(), 1, errOut.Fd()},
		Sys: &syscall.SysProcAttr{Credential: cred}})
	if err != nil {
		return 127, fmt.Errorf("exec %s: %w", argv[0], err)
	}
	r.Close()
	// SIGUSR1 from the worker (a timeout, a kill) ends the program and keeps the container.
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		for range usr1 {
			_ = syscall.Kill(-1, syscall.SIGKILL)
		}
	}()
	var hold holdMarker
	go func() {
		err := relayStdin(w, os.Stdin, &hold)
		if errors.Is(err, io.EOF) {
			// The worker is gone: end everything, this init last.
			_ = syscall.Kill(-1, syscall.SIGKILL)
			os.Exit(137)
		}
		fmt.Fprintln(os.Stderr, "sandbox init: stdin:", err)
		_ = syscall.Kill(-1, syscall.SIGKILL)
		os.Exit(1)
	}()
	ws, err := sandbox.ReapUntil(pid)
	// What the program left behind ends with it, as when a program is pid 1 of its container.
	_ = syscall.Kill(-1, syscall.SIGKILL)
	if err != nil {
		return 1, err
	}
	if m := hold.get(); m != nil {
		// No process but this one is left to write: the marker, which the program never saw,
		// ends the output. The container stays, and /workspace with it, until the worker's
		// attach closes (relayStdin exits) or it is removed.
		sandbox.KillAll()
		if _, err := fmt.Fprintf(errOut, "%s\n", m); err != nil {
			return 1, err
		}
		if _, err := fmt.Fprintf(os.Stdout, "%s%d\n", m, uint32(ws)); err != nil {
			return 1, err
		}
		select {}
	}
	if ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return ws.ExitStatus(), nil
}

// droppedSignals are the signals the init catches and drops: all but SIGUSR1 (the worker's), those
// that cannot be caught, and those whose default is to do nothing (SIGCHLD, SIGURG, SIGWINCH).
func droppedSignals() []os.Signal {
	var out []os.Signal
	for sig := syscall.Signal(1); sig < 32; sig++ {
		switch sig {
		case syscall.SIGUSR1, syscall.SIGKILL, syscall.SIGSTOP, syscall.SIGCHLD, syscall.SIGURG, syscall.SIGWINCH:
			continue
		}
		out = append(out, sig)
	}
	return out
}

// programUser is the uid and gid the program runs as, with no supplementary groups.
func programUser() (*syscall.Credential, error) {
	v := os.Getenv(EnvUser)
	u, g, ok := strings.Cut(v, ":")
	uid, uerr := strconv.ParseUint(u, 10, 32)
	gid, gerr := strconv.ParseUint(g, 10, 32)
	if !ok || uerr != nil || gerr != nil || uid == 0 {
		return nil, fmt.Errorf("program user %q: want uid:gid, uid not 0", v)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// dropCaps empties the bounding set of this thread, which the program inherits, and keeps only
// CAP_KILL, CAP_SETUID and CAP_SETGID: the program's uid change clears those, and
// no-new-privileges keeps it from regaining any.
func dropCaps() error {
	for c := 0; c <= 63; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
			return fmt.Errorf("drop capability %d: %w", c, err)
		}
	}
	keep := uint32(1)<<unix.CAP_KILL | uint32(1)<<unix.CAP_SETUID | uint32(1)<<unix.CAP_SETGID
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := [2]unix.CapUserData{{Effective: keep, Permitted: keep}}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

// keepStderrForProgram returns a copy of the container's stderr for the program, and points the
// init's own stderr at /dev/null: the container's stderr is the job's, and nothing of the init (its
// errors, or a crash report of the Go runtime) may appear among the job's output. The worker
// learns of an init that failed from the container's exit and logs it.
func keepStderrForProgram() (int, error) {
	fd, err := unix.FcntlInt(2, unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return -1, fmt.Errorf("stderr: %w", err)
	}
	null, err := unix.Open("/dev/null", unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("stderr: %w", err)
	}
	defer unix.Close(null)
	if err := unix.Dup3(null, 2, 0); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("stderr: %w", err)
	}
	return fd, nil
}

// relayStdin reads frames from in until it ends, and hands their data to the program's stdin w
// (closing it at a close frame) through a writer of its own: the program may never read its stdin,
// and a read of in that waited on a full pipe would never see the EOF that says the worker died. It
// returns only with an error, io.EOF once in reaches its end. A hold frame's marker goes to hold,
// never to the program.
func relayStdin(w *os.File, in io.Reader, hold *holdMarker) error {
	q := &stdinQueue{}
	q.cond.L = &q.mu
	go q.writeTo(w)
	defer q.stop()
	var hdr [5]byte
	for {
		if _, err := io.ReadFull(in, hdr[:]); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				err = io.EOF
			}
			return err
		}
		data := io.LimitReader(in, int64(binary.BigEndian.Uint32(hdr[1:])))
		switch hdr[0] {
		case FrameData:
			// The worker sends no more than the job's stdin, which its policy bounds, so what the
			// program has not read yet is held in memory, the container's own.
			b, err := io.ReadAll(data)
			if err != nil {
				return err
			}
			q.push(b, false)
		case FrameClose:
			q.push(nil, true)
		case FrameHold:
			m, err := io.ReadAll(io.LimitReader(data, 256))
			if err == nil {
				_, err = io.Copy(io.Discard, data)
			}
			if err != nil {
				return err
			}
			hold.set(m)
		default:
			return fmt.Errorf("frame kind %q", hdr[0])
		}
	}
}

// stdinQueue is the data relayStdin read and the program has not taken yet.
type stdinQueue struct {
	mu      sync.Mutex
	cond    sync.Cond
	chunks  [][]byte
	closing bool // a close frame came: close the pipe once the chunks are written
	stopped bool // the relay ended: write nothing more
}

func (q *stdinQueue) push(b []byte, closing bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(b) > 0 {
		q.chunks = append(q.chunks, b)
	}
	q.closing = q.closing || closing
	q.cond.Signal()
}

func (q *stdinQueue) stop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.stopped = true
	q.cond.Signal()
}

// writeTo writes the chunks to w in order, and closes w after a close frame's. A write the
// program's end of the pipe refused drops the rest. It ends with the relay, or once w is closed;
// a write blocked on a program that never reads ends when the init kills the program.
func (q *stdinQueue) writeTo(w *os.File) {
	broken := false
	for {
		q.mu.Lock()
		for len(q.chunks) == 0 && !q.closing && !q.stopped {
			q.cond.Wait()
		}
		if q.stopped {
			q.mu.Unlock()
			return
		}
		if len(q.chunks) == 0 { // closing, everything written
			q.mu.Unlock()
			w.Close()
			return
		}
		b := q.chunks[0]
		q.chunks[0] = nil
		q.chunks = q.chunks[1:]
		q.mu.Unlock()
		if !broken {
			_, err := w.Write(b)
			broken = err != nil
		}
	}
}

// holdMarker is the marker a hold frame brought, once.
type holdMarker struct {
	mu sync.Mutex
	m  []byte
}

func (h *holdMarker) set(m []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.m = m
}

func (h *holdMarker) get() []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m
}

// collect is the collector: every regular file of /workspace, in path order, as a tar stream on
// out. It runs in the container as the sandbox user, after the program and its processes ended.
func collect(out, errOut io.Writer) int {
	tw := tar.NewWriter(out)
	err := sandbox.WalkFiles(context.Background(), "/workspace", func(string) bool { return true }, func(p string, size int64, r io.Reader) error {
		if err := tw.WriteHeader(&tar.Header{Name: p, Size: size, Mode: 0o644, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := io.Copy(tw, r)
		return err
	})
	if errors.Is(err, sandbox.ErrWalkBound) {
		// The stream of the files before the bound is complete: say where it ends, in an entry
		// no file of the workspace can make.
		err = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeXGlobalHeader, PAXRecords: map[string]string{PAXWalkBound: "1"}, Format: tar.FormatPAX})
	}
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		fmt.Fprintln(errOut, "collect:", err)
		return 1
	}
	return 0
}

// programUserOnly switches a helper started as root (a runtime that must read the init to
// execute it, see docker.RuntimeTraits.ExecNeedsRead) to the sandbox user its environment names,
// before it touches anything of the job's. A helper started as that user stays so.
func programUserOnly() error {
	if os.Getuid() != 0 {
		return nil
	}
	cred, err := programUser()
	if err != nil {
		return err
	}
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(int(cred.Gid)); err != nil {
		return fmt.Errorf("setgid: %w", err)
	}
	if err := syscall.Setuid(int(cred.Uid)); err != nil {
		return fmt.Errorf("setuid: %w", err)
	}
	return nil
}

// limitProcs sets RLIMIT_NPROC, soft and hard, of every other process of this user (the
// program, waiting for its payload) to the count args hold: lowering a limit of a process of
// one's own uid needs no capability.
func limitProcs(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("want a count, got %q", args)
	}
	n, err := strconv.ParseUint(args[0], 10, 64)
	if err != nil {
		return err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	uid := uint32(os.Getuid())
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		var st unix.Stat_t
		if unix.Stat("/proc/"+e.Name(), &st) != nil || st.Uid != uid {
			continue
		}
		if err := unix.Prlimit(pid, unix.RLIMIT_NPROC, &unix.Rlimit{Cur: n, Max: n}, nil); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("prlimit %d: %w", pid, err)
		}
	}
	return nil
}

// PAXWalkBound is the record of the collector's last entry when its walk reached
// [sandbox.ErrWalkBound].
const PAXWalkBound = "RUNFLEET.walk_bound"

// WriteFrame writes one frame of kind to a container's stdin.
func WriteFrame(w io.Writer, kind byte, data []byte) error {
	var hdr [5]byte
	hdr[0] = kind
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(data)))
	_, err := w.Write(append(hdr[:], data...))
	return err
}
