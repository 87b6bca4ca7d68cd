// Package bootstrap is the generic bootstrap of a language made from a manifest (package
// profile): what a sandbox of such a profile starts, waiting for its job.
//
// It is the sandbox's own supervisor binary run a third time: the profile's command is
// [SelfExe] [Arg] spec, and the supervisor's child, still that binary when it calls execve,
// finds it again through /proc/self/exe, so no root file system or image needs a copy of it.
// It writes [Ready], reads the payload (package profile's Payload: a "runfleet1 <n>" line, n bytes
// of JSON), writes the job's files and its code under /workspace, compiles the code when the
// spec says how, and executes the program, which inherits the rest of stdin.
//
// A compile runs under its own limits: a timeout (its process group is killed), a memory
// bound (RLIMIT_DATA, the kernel's limit on private writable memory, which a JVM's or Go's
// reserved address space does not count against) and a bound on the output kept. Its stdin is
// /dev/null, so it cannot eat the program's. Once it ends, the first line of stdout says how:
// [StatusRun], then the program's own output, or [StatusCompileError], then nothing, with the
// compiler's output on stderr. The program's output always follows that line, so no program
// can forge it.
package bootstrap

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// SelfExe and Arg start the generic bootstrap: a profile's command is SelfExe, Arg, the spec.
const (
	SelfExe = "/proc/self/exe"
	Arg     = "--runfleet-bootstrap"
)

// Ready is what a bootstrap writes once it waits for the payload (sandbox.Profile.Ready).
const Ready = "runfleet1 ready\n"

// The first line of stdout of a profile that compiles.
const (
	StatusRun          = "runfleet1 run\n"
	StatusCompileError = "runfleet1 compile_error\n"
)

// Defaults of [Compile]'s zero fields.
const (
	DefaultCompileTimeout = 10 * time.Second
	DefaultCompileOutput  = 64 << 10
)

// Workspace is the job's directory, where the files, the code and the compiler's output are.
const Workspace = "/workspace"

// Spec is what the bootstrap does, from a manifest.
type Spec struct {
	Source  string   `json:"source"` // file name of the code under Workspace
	Compile *Compile `json:"compile,omitempty"`
	Run     []string `json:"run"`           // the job's args are appended
	Env     []string `json:"env,omitempty"` // NAME=value, before the job's own
}

// Compile is a manifest's compile step. Zero fields take the defaults above; no memory bound
// means the sandbox's alone.
type Compile struct {
	Argv        []string `json:"argv"`
	TimeoutMS   int64    `json:"timeout_ms,omitempty"`
	MemoryBytes int64    `json:"memory_bytes,omitempty"`
	OutputBytes int64    `json:"output_bytes,omitempty"`
}

// Timeout is c's timeout, or the default.
func (c *Compile) Timeout() time.Duration {
	if c.TimeoutMS > 0 {
		return time.Duration(c.TimeoutMS) * time.Millisecond
	}
	return DefaultCompileTimeout
}

// Command is the profile command that starts the generic bootstrap for s.
func Command(s Spec) ([]string, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	return []string{SelfExe, Arg, string(b)}, nil
}

// Main runs the bootstrap when this process was started as one, and never returns then. The
// sandbox supervisor's main calls it first, as do the worker's and the test binaries that start
// sandboxes by re-executing themselves.
func Main() {
	if len(os.Args) != 3 || os.Args[1] != Arg {
		return
	}
	// Every thread counts against the job's pids limit until the program is executed.
	runtime.GOMAXPROCS(1)
	var s Spec
	err := json.Unmarshal([]byte(os.Args[2]), &s)
	if err == nil {
		err = run(s)
	}
	fmt.Fprintln(os.Stderr, "runfleet bootstrap:", err)
	os.Exit(127)
}

// payload is what profile.Payload encodes.
type payload struct {
	Code  string            `json:"code"`
	Args  []string          `json:"args"`
	Files []file            `json:"files"`
	Env   map[string]string `json:"env"`
}

type file struct {
	Path    string `json:"path"`
	Content []byte `json:"content"`
	Mode    uint32 `json:"mode"`
}

// run returns only with an error; otherwise the program replaced it or it exited.
func run(s Spec) error {
	if len(s.Run) == 0 || s.Source == "" {
		return errors.New("spec without run or source")
	}
	if err := os.Chdir(Workspace); err != nil {
		return err
	}
	if _, err := os.Stdout.WriteString(Ready); err != nil {
		return err
	}
	p, err := readPayload(os.Stdin)
	if err != nil {
		return err
	}
	for _, f := range p.Files {
		if err := write(f.Path, f.Content, f.Mode); err != nil {
			return err
		}
	}
	if err := write(s.Source, []byte(p.Code), 0o644); err != nil {
		return err
	}
	env := append(os.Environ(), s.Env...)
	if s.Compile != nil {
		ok, err := compile(s.Compile, env)
		if err != nil {
			return err
		}
		if !ok {
			os.Exit(1)
		}
		if _, err := os.Stdout.WriteString(StatusRun); err != nil {
			return err
		}
	}
	for k, v := range p.Env {
		env = append(env, k+"="+v)
	}
	path := s.Run[0]
	if !strings.Contains(path, "/") {
		if path, err = exec.LookPath(path); err != nil {
			return err
		}
	}
	argv := append(append([]string{}, s.Run...), p.Args...)
	return fmt.Errorf("exec %s: %w", s.Run[0], syscall.Exec(path, argv, env))
}

// readPayload reads the header and the JSON with exact reads, leaving the rest of r to the program.
func readPayload(r io.Reader) (payload, error) {
	var header []byte
	b := make([]byte, 1)
	for !bytes.HasSuffix(header, []byte("\n")) {
		if _, err := io.ReadFull(r, b); err != nil || len(header) > 64 {
			return payload{}, errors.New("no payload")
		}
		header = append(header, b[0])
	}
	n, ok := strings.CutPrefix(strings.TrimSpace(string(header)), "runfleet1 ")
	size, err := strconv.Atoi(n)
	if !ok || err != nil || size < 0 {
		return payload{}, errors.New("unknown payload version")
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(r, body); err != nil {
		return payload{}, errors.New("payload cut short")
	}
	var p payload
	return p, json.Unmarshal(body, &p)
}

// write writes a file under the workspace, never through a link a job's file made.
func write(name string, content []byte, mode uint32) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	if mode == 0 {
		mode = 0o644
	}
	fd, err := unix.Open(name, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode&0o7777)
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	_, err = f.Write(content)
	return errors.Join(err, f.Close())
}

// compile runs c and reports whether it succeeded; when it did not, it has written
// StatusCompileError and the compiler's output.
func compile(c *Compile, env []string) (bool, error) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		return false, err
	}
	defer null.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return false, err
	}
	defer r.Close()
	path := c.Argv[0]
	if !strings.Contains(path, "/") {
		if path, err = exec.LookPath(path); err != nil {
			w.Close()
			return false, err
		}
	}
	// The bound is the bootstrap's own soft limit while it forks, inherited by the compiler.
	var old unix.Rlimit
	if c.MemoryBytes > 0 {
		if err := unix.Getrlimit(unix.RLIMIT_DATA, &old); err != nil {
			w.Close()
			return false, err
		}
		lim := old
		lim.Cur = min(uint64(c.MemoryBytes), old.Max)
		if err := unix.Setrlimit(unix.RLIMIT_DATA, &lim); err != nil {
			w.Close()
			return false, err
		}
	}
	pid, err := syscall.ForkExec(path, c.Argv, &syscall.ProcAttr{Dir: Workspace, Env: env,
		Files: []uintptr{null.Fd(), w.Fd(), w.Fd()}, Sys: &syscall.SysProcAttr{Setpgid: true}})
	if c.MemoryBytes > 0 {
		_ = unix.Setrlimit(unix.RLIMIT_DATA, &old)
	}
	w.Close()
	if err != nil {
		return false, fmt.Errorf("compile: exec %s: %w", c.Argv[0], err)
	}
	limit := cmp.Or(c.OutputBytes, DefaultCompileOutput)
	var out bytes.Buffer
	var copied sync.WaitGroup
	copied.Go(func() {
		_, _ = io.Copy(&out, io.LimitReader(r, limit))
		_, _ = io.Copy(io.Discard, r)
	})
	var timedOut atomic.Bool
	timer := time.AfterFunc(c.Timeout(), func() {
		timedOut.Store(true)
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	})
	var ws syscall.WaitStatus
	for {
		_, err = syscall.Wait4(pid, &ws, 0, nil)
		if err != syscall.EINTR {
			break
		}
	}
	timer.Stop()
	// What the compiler left in its group ends with it, and with them the pipe's last writers.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	copied.Wait()
	if err != nil {
		return false, fmt.Errorf("compile: wait: %w", err)
	}
	if ws.Exited() && ws.ExitStatus() == 0 {
		return true, nil
	}
	if _, err := os.Stdout.WriteString(StatusCompileError); err != nil {
		return false, err
	}
	_, _ = os.Stderr.Write(out.Bytes())
	switch {
	case timedOut.Load():
		fmt.Fprintf(os.Stderr, "\ncompile: timed out after %s\n", c.Timeout())
	case ws.Signaled():
		fmt.Fprintf(os.Stderr, "\ncompile: killed by %s\n", unix.SignalName(ws.Signal()))
	}
	if int64(out.Len()) == limit {
		fmt.Fprintf(os.Stderr, "\ncompile: output cut at %d bytes\n", limit)
	}
	return false, nil
}
