package docker

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/runfleet/runfleet/internal/sandbox"
)

// initPath is where a container finds the worker's executable, an execute-only copy
// bind-mounted read-only, to run it as its init.
const initPath = "/.runfleet/init"

// initEnv is the init's own environment, which the program does not inherit. GORACE: a
// race-enabled build (tests) would otherwise sleep a second in its exit.
var initEnv = []string{"GOMAXPROCS=1", "GORACE=atexit_sleep_ms=0"}

// Frames of a container's stdin: a kind byte, a big-endian uint32 length, the data.
const (
	frameData  = 'D' // bytes for the program's stdin
	frameClose = 'E' // the program's stdin ends
)

// Init runs the container init when this process was started as one, and never returns then.
// The worker's main calls it first, and test binaries in TestMain.
//
// The init is pid 1 of the container. It starts the program, hands it the stdin frames the worker
// sends, and ends the container (every process of it) when the program ends, or when its own
// stdin reaches EOF: the daemon closes it when the worker's attach connection closes, which the
// kernel does when the worker dies in any way.
func Init() {
	if len(os.Args) < 2 || os.Args[0] != initPath {
		return
	}
	code, err := runInit(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox init:", err)
	}
	os.Exit(code)
}

func runInit(argv []string) (int, error) {
	// Not dumpable: the program, of the same uid, cannot read the init's memory or environment.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return 1, fmt.Errorf("dumpable: %w", err)
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return 127, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return 1, err
	}
	env := slices.DeleteFunc(os.Environ(), func(v string) bool { return slices.Contains(initEnv, v) })
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{Env: env, Files: []uintptr{r.Fd(), 1, 2}})
	if err != nil {
		return 127, fmt.Errorf("exec %s: %w", argv[0], err)
	}
	r.Close()
	go func() {
		err := relayStdin(w, os.Stdin)
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
	if ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return ws.ExitStatus(), nil
}

// relayStdin copies data frames from in to the program's stdin w until a close frame, then
// reads on: it returns only with an error, io.EOF once in reaches its end.
func relayStdin(w *os.File, in io.Reader) error {
	var hdr [5]byte
	buf := make([]byte, 32<<10)
	broken := false // the program closed its stdin: frames are read and dropped
	for {
		if _, err := io.ReadFull(in, hdr[:]); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				err = io.EOF
			}
			return err
		}
		data := io.LimitReader(in, int64(binary.BigEndian.Uint32(hdr[1:])))
		switch hdr[0] {
		case frameData:
			for {
				n, err := data.Read(buf)
				if n > 0 && !broken {
					_, werr := w.Write(buf[:n])
					broken = werr != nil
				}
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					return err
				}
			}
		case frameClose:
			w.Close()
			broken = true
		default:
			return fmt.Errorf("frame kind %q", hdr[0])
		}
	}
}

// privateCopy copies the init binary at path into dir, named by its content, execute-only: the
// sandbox user may run it as the container's init but not read it. Workers of one host share
// the copy; each writes it whole under a temporary name first.
func privateCopy(path, dir string) (string, error) {
	// Streamed, never read whole: the worker's binary is tens of MiB, which a worker's heap
	// would otherwise hold until the scavenger returns it.
	src, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer src.Close()
	h := sha256.New()
	size, err := io.Copy(h, src)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return "", err
	}
	dst := filepath.Join(dir, "init-"+hex.EncodeToString(h.Sum(nil)[:8]))
	if fi, err := os.Stat(dst); err == nil && fi.Mode().Perm() == 0o711 && fi.Size() == size {
		return dst, nil
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
	return dst, os.Rename(tmp.Name(), dst)
}

// frameWriter writes data frames to a container's stdin.
type frameWriter struct{ w io.Writer }

func (f frameWriter) Write(b []byte) (int, error) {
	if err := writeFrame(f.w, frameData, b); err != nil {
		return 0, err
	}
	return len(b), nil
}

func writeFrame(w io.Writer, kind byte, data []byte) error {
	var hdr [5]byte
	hdr[0] = kind
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(data)))
	if _, err := w.Write(append(hdr[:], data...)); err != nil {
		return err
	}
	return nil
}
