package profile_test

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// runBootstrap runs the host's interpreter with a built-in bootstrap, as a sandbox does, and
// sends req's payload in.
func runBootstrap(t *testing.T, lang string, req job.Request) (stdout, stderr string, code int) {
	t.Helper()
	argv := profile.Builtin("", "")[lang].Interpreter
	if _, err := os.Stat(argv[0]); err != nil {
		testenv.Missing(t, "%s: %v", argv[0], err)
	}
	payload, err := profile.Payload(req)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = t.TempDir()
	cmd.Env = []string{"LANG=C.UTF-8", "PATH=/usr/bin:/bin"}
	cmd.Stdin = bytes.NewReader(payload)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	stdout, ok := strings.CutPrefix(out.String(), profile.Ready)
	if !ok {
		t.Fatalf("stdout %q does not start with the ready line %q", clip(out.String()), profile.Ready)
	}
	return stdout, errb.String(), code
}

// TestPythonExit: the bootstrap ends python3 at once after the program (os._exit), keeping the
// exit status and output exact, and falls back to a normal exit whenever a program could tell:
// non-daemon threads, atexit handlers, open files.
func TestPythonExit(t *testing.T) {
	dir := t.TempDir()
	big := strings.Repeat("line\n", 100000)
	cases := []struct {
		name, code string
		stdout     string
		stderrHas  string
		exit       int
		check      func(t *testing.T)
	}{
		{name: "buffered output kept", code: "import sys\nfor _ in range(100000): sys.stdout.write('line\\n')", stdout: big},
		{name: "stderr kept", code: "import sys\nsys.stderr.write('err'); print('out', end='')", stdout: "out", stderrHas: "err"},
		{name: "exit code", code: "import sys\nprint('x')\nsys.exit(3)", stdout: "x\n", exit: 3},
		{name: "exit None", code: "raise SystemExit(None)", exit: 0},
		{name: "exit True", code: "import sys; sys.exit(True)", exit: 1},
		{name: "exit 256 wraps", code: "import sys; sys.exit(256)", exit: 0},
		{name: "exit message", code: "import sys; sys.exit('bye now')", stderrHas: "bye now\n", exit: 1},
		{name: "uncaught exception", code: "print('before')\nraise ValueError('boom')", stdout: "before\n", stderrHas: "ValueError: boom", exit: 1},
		{name: "non-daemon thread runs", code: "import threading, time\n" +
			"threading.Thread(target=lambda: (time.sleep(0.2), print('thread done'))).start()", stdout: "thread done\n"},
		{name: "thread pool runs", code: "from concurrent.futures import ThreadPoolExecutor\nimport time\n" +
			"ThreadPoolExecutor(1).submit(lambda: (time.sleep(0.2), print('task done')))", stdout: "task done\n"},
		{name: "atexit runs", code: "import atexit\natexit.register(print, 'atexit ran')\nprint('main')", stdout: "main\natexit ran\n"},
		{name: "atexit after exit code", code: "import atexit, sys\natexit.register(print, 'atexit ran')\nsys.exit(5)", stdout: "atexit ran\n", exit: 5},
		{name: "open file flushed", code: "f = open('" + filepath.Join(dir, "plain") + "', 'w')\nf.write('kept')",
			check: func(t *testing.T) {
				if b, _ := os.ReadFile(filepath.Join(dir, "plain")); string(b) != "kept" {
					t.Errorf("file holds %q, want %q", b, "kept")
				}
			}},
		{name: "open gzip finished", code: "import gzip\ng = gzip.open('" + filepath.Join(dir, "z.gz") + "', 'wt')\ng.write('zipped')",
			check: func(t *testing.T) {
				f, err := os.Open(filepath.Join(dir, "z.gz"))
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				zr, err := gzip.NewReader(f)
				if err != nil {
					t.Fatal(err)
				}
				if b, err := io.ReadAll(zr); err != nil || string(b) != "zipped" {
					t.Errorf("gzip holds %q, %v; want %q", b, err, "zipped")
				}
			}},
		{name: "replaced stdout flushed", code: "import sys, io\nclass W(io.TextIOBase):\n    def __init__(s): s.b = []\n" +
			"    def write(s, x): s.b.append(x); return len(x)\n    def flush(s): sys.__stdout__.write(''.join(s.b)); s.b = []\n" +
			"sys.stdout = W()\nprint('via W')", stdout: "via W\n"},
		// The fast path: nothing of the finalization runs, which Python does not promise anyway.
		{name: "finalization skipped", code: "class D:\n    def __del__(self): print('finalized')\nd = D()\nprint('end')", stdout: "end\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stdout, stderr, code := runBootstrap(t, "python3", job.Request{Language: "python3", Code: c.code})
			if stdout != c.stdout {
				t.Errorf("stdout = %q (%d bytes), want %d bytes %q", clip(stdout), len(stdout), len(c.stdout), clip(c.stdout))
			}
			if code != c.exit {
				t.Errorf("exit code = %d, want %d (stderr %q)", code, c.exit, clip(stderr))
			}
			if c.stderrHas != "" && !strings.Contains(stderr, c.stderrHas) {
				t.Errorf("stderr = %q, want it to contain %q", clip(stderr), c.stderrHas)
			}
			if c.stderrHas == "" && stderr != "" {
				t.Errorf("stderr = %q, want none", clip(stderr))
			}
			if c.check != nil {
				c.check(t)
			}
		})
	}
}

// TestPayloadDecoded: the payload's code and env arrive exact in both bootstraps, whatever
// characters they hold (python3 decodes it without the json package). Files are written under
// /workspace, so the conformance suite checks them in a sandbox.
func TestPayloadDecoded(t *testing.T) {
	env := map[string]string{"QUOTED": `a"b\c<d>&e`, "UNICODE": "日本\u2028"}
	for lang, code := range map[string]string{
		"python3": "import os\nprint(os.environ['QUOTED'], os.environ['UNICODE'], 'é<&>\\u2028')",
		"nodejs":  "console.log(process.env.QUOTED, process.env.UNICODE, 'é<&>\\u2028')",
	} {
		t.Run(lang, func(t *testing.T) {
			stdout, stderr, code := runBootstrap(t, lang, job.Request{Language: lang, Code: code, Env: env})
			want := `a"b\c<d>&e` + " 日本\u2028 é<&>\u2028\n"
			if stdout != want || code != 0 {
				t.Errorf("stdout %q, exit %d; want %q, 0 (stderr %q)", stdout, code, want, clip(stderr))
			}
		})
	}
}

// TestNodeRunsToItsEnd: the node bootstrap never cuts a program short: pending timers, promises
// and exit handlers run, and exit codes are kept.
func TestNodeRunsToItsEnd(t *testing.T) {
	cases := []struct {
		name, code, stdout string
		exit               int
	}{
		{name: "timers and promises", code: "setTimeout(() => console.log('timer'), 100)\n" +
			"new Promise(r => setTimeout(r, 50)).then(() => console.log('promise'))\nconsole.log('main')", stdout: "main\npromise\ntimer\n"},
		{name: "exit handler", code: "process.on('exit', c => console.log('exit', c))\nprocess.exitCode = 3", stdout: "exit 3\n", exit: 3},
		{name: "exit code", code: "console.log('x'); process.exit(4)", stdout: "x\n", exit: 4},
		{name: "large output", code: "process.stdout.write('y'.repeat(1 << 20))", stdout: strings.Repeat("y", 1<<20)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stdout, stderr, code := runBootstrap(t, "nodejs", job.Request{Language: "nodejs", Code: c.code})
			if stdout != c.stdout || code != c.exit {
				t.Errorf("stdout %q, exit %d; want %q, %d (stderr %q)", clip(stdout), code, clip(c.stdout), c.exit, clip(stderr))
			}
		})
	}
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
