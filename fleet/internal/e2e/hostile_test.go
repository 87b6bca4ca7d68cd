package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// hostileCase is one job of the hostile corpus (guarantee G11): what it sends, and what its
// settlement and output must then be.
type hostileCase struct {
	name     string
	provider string // "" for every provider
	req      job.Request
	check    func(t *testing.T, f *fleet, st job.Settlement, stdout string)
}

// corpusSecret is what a descriptor the worker inherited holds: no job may read it.
const corpusSecret = "runfleet-corpus-secret-6b1f"

func hostileCorpus() []hostileCase {
	status := func(want job.Status, reason job.Reason) func(*testing.T, *fleet, job.Settlement, string) {
		return func(t *testing.T, _ *fleet, st job.Settlement, out string) {
			t.Helper()
			if st.Status != want || (reason != "" && st.Reason != reason) {
				t.Errorf("settled %s/%s (%s), want %s/%s; stdout %.300q", st.Status, st.Reason, st.Detail, want, reason, out)
			}
		}
	}
	succeededWith := func(want ...string) func(*testing.T, *fleet, job.Settlement, string) {
		return func(t *testing.T, f *fleet, st job.Settlement, out string) {
			t.Helper()
			status(job.StatusSucceeded, "")(t, f, st, out)
			for _, w := range want {
				if !strings.Contains(out, w) {
					t.Errorf("stdout %.500q lacks %q", out, w)
				}
			}
		}
	}
	py := func(code string, limits job.Limits, outputs ...string) job.Request {
		return job.Request{Language: "python3", Code: code, Limits: limits, Outputs: outputs}
	}
	short := job.Limits{Timeout: 20 * time.Second}
	forkBomb := py("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass", job.Limits{Timeout: 3 * time.Second})
	// 1 GiB at a 64 MiB limit.
	memoryHog := py("b = b'x' * (1 << 30)\nprint(len(b))", job.Limits{Timeout: 20 * time.Second, MemoryBytes: 64 << 20})
	return []hostileCase{{
		// Each further `**/` multiplied the matcher's time by about 45: the worker spent minutes
		// in one job's collection while its lease kept being extended.
		name: "exponential outputs pattern",
		req: py(`import os
p = "/workspace/" + "/".join(["d"] * 24)
os.makedirs(p)
open(p + "/y", "w").write("y")
print("made")`, short, strings.Repeat("**/", 16)+"x"),
		check: succeededWith("made"),
	}, {
		name:  "output flood",
		req:   py("import sys\nwhile True: sys.stdout.write('x' * 65536)", short),
		check: status(job.StatusFailed, job.ReasonOutputLimit),
	}, {
		name: "bytes that are not text and terminal escapes",
		req: py(`import sys
sys.stdout.buffer.write(bytes(range(256)) + b"\x1b]0;owned\x07\x1b[2J\n")
print("after")`, short),
		check: func(t *testing.T, f *fleet, st job.Settlement, out string) {
			succeededWith("after")(t, f, st, out)
			if !strings.Contains(out, string(bytes.Repeat([]byte{0xff}, 1))+"\x1b]0;owned\x07") {
				t.Errorf("stdout %.600q does not hold the bytes written, unchanged", out)
			}
		},
	}, {
		// A name that is not UTF-8 would be listed as U+FFFD and could never be fetched.
		name: "artifact names that are not UTF-8",
		req: py(`import os
open(b"/workspace/\xff\xfe.bin", "wb").write(b"bad")
open("/workspace/ok.txt", "w").write("ok")
print("wrote")`, short, "*"),
		check: func(t *testing.T, f *fleet, st job.Settlement, out string) {
			succeededWith("wrote")(t, f, st, out)
			found := false
			for _, a := range st.Artifacts {
				rc, err := f.client.OpenArtifact(t.Context(), st.JobID, a.Path)
				if err != nil {
					t.Errorf("listed artifact %q cannot be opened: %v", a.Path, err)
					continue
				}
				b, _ := io.ReadAll(rc)
				rc.Close()
				if a.Path == "ok.txt" {
					found = string(b) == "ok"
				}
			}
			if !found {
				t.Errorf("ok.txt not kept byte-exact among %+v", st.Artifacts)
			}
		},
	}, {
		// As pid 1's peer uid (Docker) the job could end its init with a default handler; the
		// outcome must stay the job's own.
		name: "signals to its own init and parent",
		// A program forked from a zygote has no parent in its pid namespace: getppid() is 0, and
		// kill(0) would signal the job's own process group.
		req: py(`import os
for target in {1, os.getppid()} - {0}:
    for s in range(1, 32):
        try:
            os.kill(target, s)
        except OSError:
            pass
print("alive")`, short),
		check: succeededWith("alive"),
	}, {
		name: "descriptors the worker inherited",
		req: py(`import os
seen = []
for fd in range(3, 256):
    try:
        seen.append(os.read(fd, 4096))
    except OSError:
        pass
print("read", b"".join(seen))
print("fds", sorted(os.listdir("/proc/self/fd")))`, short),
		check: func(t *testing.T, f *fleet, st job.Settlement, out string) {
			succeededWith("read")(t, f, st, out)
			if strings.Contains(out, corpusSecret) {
				t.Errorf("the job read a descriptor the worker inherited: %.500q", out)
			}
		},
	}, {
		// Each of these families makes the kernel load a module; AIO contexts are host-wide.
		name: "socket families and AIO the profiles do not need",
		req: py(`import ctypes, errno, socket
libc = ctypes.CDLL(None, use_errno=True)
for fam in (4, 5, 9, 17, 21, 29, 30, 31, 38, 40, 41, 44):
    try:
        socket.socket(fam, socket.SOCK_DGRAM).close()
        print("family", fam, "allowed")
    except OSError as e:
        print("family", fam, "EPERM" if e.errno == errno.EPERM else "errno %d" % e.errno)
ctx = ctypes.c_ulong(0)
r = libc.syscall(206, 1, ctypes.byref(ctx))
print("io_setup", "EPERM" if r == -1 and ctypes.get_errno() == errno.EPERM else "result %d errno %d" % (r, ctypes.get_errno()))`, short),
		check: func(t *testing.T, f *fleet, st job.Settlement, out string) {
			succeededWith("io_setup EPERM")(t, f, st, out)
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				if strings.HasPrefix(line, "family") && !strings.HasSuffix(line, "EPERM") {
					t.Errorf("%s, want EPERM from the filter", line)
				}
			}
		},
	}, {
		name:     "host information in /proc",
		provider: "namespace",
		req: py(`import os
for p in ("/proc/cmdline", "/proc/key-users", "/proc/sys/kernel/hostname", "/proc/sys/kernel/core_pattern"):
    try:
        print(p, "readable", open(p).read()[:80].strip())
    except OSError as e:
        print(p, "hidden")
print("cgroup", open("/proc/self/cgroup").read().strip().replace("\n", " "))
print("mounts", open("/proc/self/mountinfo").read())`, short),
		check: func(t *testing.T, f *fleet, st job.Settlement, out string) {
			succeededWith("cgroup")(t, f, st, out)
			if strings.Contains(out, "readable") {
				t.Errorf("the job reads the host's /proc: %.800q", out)
			}
			for _, line := range strings.Split(out, "\n") {
				if strings.HasPrefix(line, "cgroup") && strings.Contains(line, "..") {
					t.Errorf("/proc/self/cgroup shows paths outside the sandbox: %s", line)
				}
			}
			if strings.Contains(out, "/dev/vd") || strings.Contains(out, "/dev/sd") || strings.Contains(out, "/dev/nvme") {
				t.Errorf("mountinfo names a host block device: %.800q", out)
			}
		},
	}, {
		name:     "fork bomb",
		provider: "namespace",
		req:      forkBomb,
		check:    status(job.StatusTimedOut, ""),
	}, {
		name:     "fork bomb",
		provider: "docker",
		req:      forkBomb,
		check:    status(job.StatusTimedOut, ""),
	}, {
		// Under gVisor every process costs the Sentry memory too (on the ptrace platform, an
		// address space mirrored in a stub process of the host, charged to the job's cgroup):
		// the bomb, held at its pids, may reach the job's memory limit before its timeout.
		name:     "fork bomb",
		provider: "gvisor",
		req:      forkBomb,
		check: func(t *testing.T, f *fleet, st job.Settlement, out string) {
			if st.Status != job.StatusFailed || st.Reason != job.ReasonOOM {
				status(job.StatusTimedOut, "")(t, f, st, out)
			}
		},
	}, {
		// On gVisor, a loaded host's OOM killer may take runsc's Sentry, and the whole sandbox
		// with it, before the init reports: the provider still reads the OOM (docs/gvisor.md).
		name:  "memory hog",
		req:   memoryHog,
		check: status(job.StatusFailed, job.ReasonOOM),
	}, {
		name:  "sleeps past its timeout",
		req:   py("import time\nprint('start', flush=True)\ntime.sleep(600)", job.Limits{Timeout: 2 * time.Second}),
		check: status(job.StatusTimedOut, ""),
	}, {
		// A daemon that outlives the program must not outlive the sandbox: checked with the
		// leftovers once the worker is gone.
		name: "daemon left behind",
		req: py(`import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(3600)
    os._exit(0)
print("parent done")`, short),
		check: succeededWith("parent done"),
	}, {
		// Daemons still forking as the program exits: a process forked while the supervisor's
		// kill runs must not escape it and hold the sandbox (gVisor let one through).
		name: "daemons forking as it exits",
		req: py(`import os, time
for _ in range(4):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        os.setsid()
        while True:
            try:
                if os.fork() == 0:
                    os.execv("/bin/sleep", ["sleep", "3600"])
            except OSError:
                time.sleep(0.01)
print("parent done", flush=True)
time.sleep(0.2)`, short),
		check: succeededWith("parent done"),
	}, {
		name:  "closes its own output",
		req:   py("import os\nos.close(1)\nos.close(2)", short),
		check: status(job.StatusSucceeded, ""),
	}}
}

// TestHostileCorpus runs every hostile job of guarantee G11 through the real queue on every
// provider: each settles as its own bounds say, the worker stays healthy, and SIGTERM still ends
// the worker within --grace.
func TestHostileCorpus(t *testing.T) {
	for _, provider := range []string{"namespace", "docker", "gvisor"} {
		t.Run(provider, func(t *testing.T) {
			f := newFleet(t)
			extra := []string{"--provider", provider, "--grace", "5s"}
			if provider != "namespace" {
				if err := exec.Command("docker", "info").Run(); err != nil {
					testenv.Missing(t, "docker daemon: %v", err)
				}
				if _, err := exec.LookPath("runsc"); provider == "gvisor" && err != nil {
					testenv.Missing(t, "runsc (scripts/setup test): %v", err)
				}
				extra = append(extra, "--image", testenv.Image())
			}
			secret := filepath.Join(t.TempDir(), "secret")
			if err := os.WriteFile(secret, []byte(corpusSecret), 0o600); err != nil {
				t.Fatal(err)
			}
			inherited, err := os.Open(secret)
			if err != nil {
				t.Fatal(err)
			}
			defer inherited.Close()
			w := f.startWith("hostile-"+provider, func(c *exec.Cmd) { c.ExtraFiles = []*os.File{inherited} }, extra...)

			type submitted struct {
				c  hostileCase
				id string
			}
			var jobs []submitted
			for _, c := range hostileCorpus() {
				if c.provider == "" || c.provider == provider {
					jobs = append(jobs, submitted{c, f.submit(c.req)})
				}
			}
			for _, j := range jobs {
				t.Run(strings.ReplaceAll(j.c.name, " ", "_"), func(t *testing.T) {
					var out bytes.Buffer
					ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
					defer cancel()
					st, err := f.client.Watch(ctx, j.id, func(p runfleet.Page) error {
						if p.Stream == job.Stdout {
							out.Write(p.Data)
						}
						return nil
					})
					var oe *job.OutcomeError
					if err != nil && !errors.As(err, &oe) {
						t.Fatalf("no settlement: %v", err)
					}
					j.c.check(t, f, st, out.String())
				})
			}

			// Healthy afterwards: both slots take a job at once.
			ids := []string{f.submit(job.Request{Language: "python3", Code: "print(1)"}), f.submit(job.Request{Language: "nodejs", Code: "console.log(2)"})}
			for _, id := range ids {
				if st := f.settlement(id, 2*time.Minute); st.Status != job.StatusSucceeded {
					t.Errorf("trivial job after the corpus settled %s/%s (%s)", st.Status, st.Reason, st.Detail)
				}
			}

			// SIGTERM still ends the worker within --grace (5 s), with a job running.
			long := f.submit(job.Request{Language: "python3", Code: "import time\nprint('up', flush=True)\ntime.sleep(600)"})
			testenv.WaitFor(t, time.Minute, "the long job's first output", func() bool { return len(f.results(long)) > 0 })
			w.signal(syscall.SIGTERM)
			w.exited(t, 5*time.Second+20*time.Second)
			if st := f.settlement(long, 10*time.Second); st.Reason != job.ReasonWorkerShutdown {
				t.Errorf("job running at SIGTERM settled %s/%s, want worker_shutdown", st.Status, st.Reason)
			}
			if provider == "namespace" {
				if left := leftoverCgroups(w.cmd.Process.Pid); len(left) > 0 {
					t.Errorf("sandbox cgroups left behind: %v", left)
				}
			}
		})
	}
}
