package providertest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/job"
)

// libc lets the battery make raw calls from python3 the way an attacker would.
const libc = "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"

func runEscape(ctx context.Context, t *testing.T, e Env) {
	// The executable of the process that makes sandboxes: the worker's, in production.
	self, _ := os.Readlink("/proc/self/exe")
	ports := fmt.Sprint(e.HostPorts)
	if ports == "[]" || ports == "" {
		ports = "[4222, 6379]"
	}
	cases := []struct {
		name string
		code string
		mod  func(*sandbox.Limits)
		want []check
	}{
		// network
		{name: "only loopback interface", code: "import socket; print(sorted(n for _, n in socket.if_nameindex()))",
			want: []check{stdoutIs("['lo']\n")}},
		{name: "no route", code: "print(len(open('/proc/self/net/route').read().strip().splitlines()))",
			want: []check{stdoutIs("1\n")}},
		{name: "host services unreachable", code: "import socket\nreached = []\nfor p in " + ports + ":\n" +
			"    s = socket.socket(); s.settimeout(1)\n    try:\n        s.connect(('127.0.0.1', p)); reached.append(p)\n" +
			"    except OSError:\n        pass\nprint('reached', reached)",
			want: []check{stdoutIs("reached []\n")}},
		{name: "no dns", code: "import socket\ntry:\n    socket.getaddrinfo('example.com', 80); print('resolved')\nexcept OSError:\n    print('no dns')",
			want: []check{stdoutIs("no dns\n")}},
		{name: "no docker socket", code: "import os; print([p for p in ('/var/run/docker.sock', '/run/docker.sock') if os.path.exists(p)])",
			want: []check{stdoutIs("[]\n")}},
		// host
		{name: "worker environment invisible", code: "import os\nprint(sorted(os.environ))\nprint(open('/proc/self/environ').read())",
			want: []check{exitCode(0), stdoutLacks(e.Secret)}},
		{name: "host processes invisible", code: "import os; print(len([p for p in os.listdir('/proc') if p.isdigit()]) <= 2)",
			want: []check{stdoutIs("True\n")}},
		// Host-wide figures: the kernel's command line, the load and memory of the whole host and
		// its pressure, which tell one tenant of the others. Absent or empty, or virtualised by
		// the provider's own kernel (gVisor's), never the host's.
		{name: "host-wide proc files hidden", code: hostProcCode, want: []check{hostProcHidden}},
		{name: "shadow unreadable", code: "try:\n    open('/etc/shadow').read(); print('read')\nexcept OSError:\n    print('denied')",
			want: []check{stdoutIs("denied\n")}},
		{name: "worker binary invisible", code: seesCode(self), want: []check{stdoutHas("sees nothing\n")}},
		{name: "root read-only", code: "try:\n    open('/usr/evil', 'w'); print('wrote')\nexcept OSError:\n    print('denied')",
			want: []check{stdoutIs("denied\n")}},
		// bombs; the supervisor holds its share of the pids limit, so the program gets the job's
		{name: "fork bomb capped", code: "import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n" +
			"            time.sleep(30); os._exit(0)\n        n += 1\nexcept OSError:\n    print('capped', n + 1 <= 16)",
			mod: func(l *sandbox.Limits) { l.Pids = 16 }, want: []check{stdoutIs("capped True\n")}},
		{name: "workspace fill bounded", code: fillCode("/workspace/fill"), want: []check{stdoutIs("bounded True\n")}},
		{name: "tmp fill bounded", code: fillCode("/tmp/fill"), want: []check{stdoutIs("bounded True\n")}},
		{name: "sleep with closed stdout times out", code: "import os, time\nos.close(1); os.close(2)\ntime.sleep(60)",
			mod: func(l *sandbox.Limits) { l.Timeout = time.Second }, want: []check{timedOut}},
		{name: "stop itself", code: "import os, signal, time\nos.kill(os.getpid(), signal.SIGSTOP)\ntime.sleep(60)",
			mod: func(l *sandbox.Limits) { l.Timeout = time.Second }, want: []check{timedOut}},
		{name: "kill all inside", code: "import os, time\nif os.fork() == 0:\n    time.sleep(30)\ntime.sleep(0.1)\nos.kill(-1, 9)\nprint('alive')",
			want: []check{stdoutIs("alive\n"), exitCode(0)}},
		// privilege
		{name: "setuid denied", code: "import os\ntry:\n    os.setuid(0); print('root')\nexcept OSError:\n    print('denied')",
			want: []check{stdoutIs("denied\n")}},
		{name: "mount denied", code: libc + "print(libc.mount(b'none', b'/tmp', b'tmpfs', 0, None))", want: []check{stdoutIs("-1\n")}},
		{name: "unshare denied", code: libc + "print(libc.unshare(0x10000000))", want: []check{stdoutIs("-1\n")}},
		{name: "keyctl denied", code: libc + "print(libc.syscall(250, 0, -3, 1, 0, 0))", want: []check{stdoutIs("-1\n")}},
		{name: "bpf denied", code: libc + "print(libc.syscall(321, 0, 0, 0))", want: []check{stdoutIs("-1\n")}},
		{name: "ptrace sibling denied", code: libc + "import time\npid = os.fork()\nif pid == 0:\n    time.sleep(5); os._exit(0)\n" +
			"print(libc.ptrace(16, pid, 0, 0))", want: []check{stdoutIs("-1\n")}},
		{name: "proc sys read-only", code: "try:\n    open('/proc/sys/kernel/hostname', 'w').write('x'); print('wrote')\nexcept OSError:\n    print('denied')",
			want: []check{stdoutIs("denied\n")}},
		{name: "not root", code: "import os; print(os.getuid() != 0 and os.geteuid() != 0)", want: []check{stdoutIs("True\n")}},
		{name: "no capabilities", code: "print([l for l in open('/proc/self/status') if l.startswith(('CapEff', 'CapPrm', 'CapBnd'))])",
			want: []check{stdoutHas("CapEff:\\t0000000000000000"), stdoutHas("CapPrm:\\t0000000000000000"), stdoutHas("CapBnd:\\t0000000000000000")}},
		// Asked of the kernel (PR_GET_NO_NEW_PRIVS), not read from /proc/self/status: gVisor's
		// status file has no NoNewPrivs line.
		{name: "no new privileges", code: libc + "print(libc.prctl(39, 0, 0, 0, 0))", want: []check{stdoutIs("1\n")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Exec(ctx, t, e, job.Request{Language: "python3", Code: c.code}, c.mod)
			e.differs(t, r)
			for _, ch := range c.want {
				ch(t, r)
			}
		})
	}
}

// hostProcCode prints, as JSON, what the job reads of each host-wide /proc file: null when it
// cannot open it.
const hostProcCode = `import json
out = {}
for p in ("/proc/cmdline", "/proc/loadavg", "/proc/meminfo", "/proc/pressure/cpu", "/proc/pressure/memory", "/proc/pressure/io"):
    try:
        out[p] = open(p).read()
    except OSError:
        out[p] = None
print(json.dumps(out))`

// hostProcHidden checks what hostProcCode read against the host's own files.
func hostProcHidden(t *testing.T, r Result) {
	t.Helper()
	var seen map[string]*string
	if err := json.Unmarshal([]byte(r.Stdout), &seen); err != nil || len(seen) == 0 {
		t.Fatalf("stdout %q: %v (stderr %q)", clip(r.Stdout), err, clip(r.Stderr))
	}
	firstLine := func(s string) string { l, _, _ := strings.Cut(s, "\n"); return l }
	for path, got := range seen {
		if got == nil || strings.TrimSpace(*got) == "" {
			continue
		}
		host, _ := os.ReadFile(path)
		var leaks bool
		switch path {
		case "/proc/cmdline":
			leaks = strings.TrimSpace(*got) == strings.TrimSpace(string(host))
		case "/proc/meminfo": // MemTotal of the host, rather than of the sandbox
			leaks = firstLine(*got) == firstLine(string(host))
		case "/proc/loadavg": // a virtual one counts no host task: "0.00 0.00 0.00 0/0 0"
			f := strings.Fields(*got)
			leaks = len(f) < 4 || !strings.HasSuffix(f[3], "/0")
		default: // pressure: no provider virtualises it
			leaks = true
		}
		if leaks {
			t.Errorf("%s shows the host's: %q", path, clip(*got))
		}
	}
}

func fillCode(path string) string {
	return "n = 0\ntry:\n    with open('" + path + "', 'wb') as f:\n        while True:\n" +
		"            f.write(b'x' * (1 << 20)); f.flush(); n += 1\nexcept OSError:\n    pass\nprint('bounded', n <= 17)"
}

func timedOut(t *testing.T, r Result) {
	t.Helper()
	if !r.Exit.TimedOut || r.Exit.Usage.Wall > 6*time.Second {
		t.Errorf("TimedOut = %v after %v, want true within 6s", r.Exit.TimedOut, r.Exit.Usage.Wall)
	}
}

// runFresh checks that nothing of one job is visible to the next.
func runFresh(ctx context.Context, t *testing.T, e Env) {
	first := Exec(ctx, t, e, job.Request{Language: "python3", Code: "import os, subprocess\nopen('/workspace/left', 'w').write('x')\n" +
		"open('/tmp/left', 'w').write('x')\nos.environ['LEFT'] = '1'\n" +
		"subprocess.Popen(['/usr/bin/python3', '-c', 'import time; time.sleep(60)', 'left-behind'], start_new_session=True)\nprint('left')",
		Env: map[string]string{"JOB_ONE": "1"}}, nil)
	if first.Stdout != "left\n" {
		t.Fatalf("first job stdout = %q, want %q (stderr %q)", first.Stdout, "left\n", first.Stderr)
	}
	// A process of the first job would show in /proc: a sandbox's supervisor may, the first job's
	// sleeper must not.
	second := Exec(ctx, t, e, job.Request{Language: "python3", Code: "import os\nleft = 0\nfor p in os.listdir('/proc'):\n" +
		"    try:\n        left += p.isdigit() and b'left-behind' in open('/proc/%s/cmdline' % p, 'rb').read()\n    except OSError:\n        pass\n" +
		"print(os.path.exists('/workspace/left'), os.path.exists('/tmp/left'), 'LEFT' in os.environ or 'JOB_ONE' in os.environ, left)"}, nil)
	if want := "False False False 0\n"; second.Stdout != want {
		t.Errorf("second job sees %q, want %q (stderr %q)", second.Stdout, want, strings.TrimSpace(second.Stderr))
	}
}
