package providertest

import (
	"context"
	"testing"

	"github.com/runfleet/runfleet/job"
)

// runHostile runs jobs that attack the sandbox's own machinery or the kernel's surface beyond
// the seccomp policy (issue 22, guarantee G11); each must end with its own outcome. Raw call
// numbers are amd64's, as in the escape battery.
func runHostile(ctx context.Context, t *testing.T, e Env) {
	cases := []struct {
		name string
		code string
		want []check
	}{
		// The program's parent is the sandbox's init or supervisor: neither may end on the job's
		// signal (SIGKILL and SIGSTOP included), nor hide the job's own outcome. A program forked
		// by a zygote has its parent outside its pid namespace: getppid() is 0, which kill reads
		// as the job's own process group.
		{name: "signals to init and parent", code: "import os\nfor s in range(1, 32):\n    for pid in {1, os.getppid()} - {0}:\n" +
			"        try:\n            os.kill(pid, s)\n        except OSError:\n            pass\nprint('alive', flush=True)\nos._exit(3)",
			want: []check{stdoutIs("alive\n"), exitCode(3)}},
		{name: "socket families beyond unix, inet, netlink refused", code: "import socket\nerrs = []\n" +
			"for fam, typ, proto in ((17, 3, 0), (21, 5, 0), (29, 3, 1), (30, 4, 0), (31, 1, 3), (41, 2, 0), (44, 3, 0), (38, 5, 0), (16, 3, 12), (16, 3, 21)):\n" +
			"    try:\n        socket.socket(fam, typ, proto).close(); errs.append('open')\n    except OSError as e:\n        errs.append(e.errno)\n" +
			"print(errs)\ns = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0); s.close()\n" +
			"a, b = socket.socketpair(); print('unix pair ok')",
			want: []check{stdoutIs("[1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\nunix pair ok\n")}},
		{name: "aio refused", code: libc + "ctx = ctypes.c_ulong(0)\nprint(libc.syscall(206, 128, ctypes.byref(ctx)), ctypes.get_errno())",
			want: []check{stdoutIs("-1 1\n")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Exec(ctx, t, e, job.Request{Language: "python3", Code: c.code}, nil)
			e.differs(t, r)
			for _, ch := range c.want {
				ch(t, r)
			}
		})
	}
}
