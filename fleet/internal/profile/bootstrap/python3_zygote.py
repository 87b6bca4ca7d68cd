# runfleet zygote for python3 (namespace provider; see its zygote.go). The worker starts it as root
# in a mount namespace of its own whose root is the profile's, and talks to it on fd 3 (a
# SOCK_SEQPACKET socket) only; fd 4 holds the sandboxes' seccomp program. It imports the modules
# named in sys.argv[2:], the profile's shared imports, and then, for each "fork <uid> <fsize>
# <cgroup>" request with the sandbox's files attached, clones one child into the sandbox's pid
# namespace and answers "pid <n>". It never runs a job's code and never reads a job's byte: each
# child enters its sandbox's namespaces, cgroup, limits, uid and seccomp filter, then runs the
# bootstrap (sys.argv[1]) as an interpreter exec'd in the sandbox would, and only the bootstrap
# reads the job's payload from stdin.
#
# The child is cloned with CLONE_PARENT, so its parent is the worker, which reaps it and reads
# its exit status whatever becomes of the zygote. What a child shares with the zygote, and so with
# every sibling: the address-space layout, the str/bytes hash secret (fixed at the interpreter's
# start, so the provider retires a zygote after some forks), and the imported modules' state
# before any job. random reseeds itself at fork (os.register_at_fork); numpy's global generator
# is reseeded here.
def _runfleet_zygote():
    import os, sys, ctypes, _socket, array, resource
    for name in sys.argv[2:]:
        __import__(name)
    libc = ctypes.PyDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.pthread_self.restype = ctypes.c_void_p
    api = ctypes.pythonapi
    nr = {"x86_64": {"seccomp": 317, "gettid": 186}, "aarch64": {"seccomp": 277, "gettid": 178}}[os.uname().machine]
    CLONE_PARENT, CLONE_CHILD_SETTID, CLONE_INTO_CGROUP, CLONE_NEWPID, CLONE_NEWCGROUP = 0x8000, 0x01000000, 0x200000000, 0x20000000, 0x02000000
    PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 4, 24, 38

    def check(r):
        if r < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
        return r

    def threads():
        with open("/proc/self/status") as f:
            return int(f.read().split("\nThreads:")[1].split()[0])

    # OpenBLAS (numpy) starts its threads at load; a clone keeps only the calling thread, so they
    # are stopped here, and a child starts its own at its first threaded call.
    if threads() > 1:
        with open("/proc/self/maps") as f:
            libs = {line.split()[-1] for line in f if "blas" in line.rsplit("/", 1)[-1]}
        for path in libs:
            shutdown = getattr(ctypes.CDLL(path), "blas_thread_shutdown_", None)
            if shutdown is not None:
                shutdown()
    if threads() != 1:
        raise SystemExit("runfleet zygote: %d threads after the imports; a fork keeps one" % threads())

    # glibc keeps the thread's id in its thread block: a clone sets it in the child as fork does.
    self_block = libc.pthread_self()
    tid_addr = self_block + 0x2d0 if os.uname().machine == "x86_64" else 0
    if tid_addr and ctypes.c_int.from_address(tid_addr).value != libc.syscall(nr["gettid"]):
        tid_addr = 0

    with os.fdopen(4, "rb") as f:
        prog = f.read()
    filt = ctypes.create_string_buffer(prog, len(prog))
    class Fprog(ctypes.Structure):  # struct sock_fprog
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    fprog = Fprog(len(prog) // 8, ctypes.addressof(filt))

    # What the imports made under $HOME and /tmp (a cache directory), each child makes again, empty.
    made = [d for top in ("/workspace", "/tmp") for d, _, _ in os.walk(top) if d != top]

    own_pidns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET, 0, 3)
    sock.send(b"ready")

    def enter(uid, fsize, fds):
        stdio, ns, cgroups = fds[:3], fds[3:7], fds[8:]
        for f in cgroups:  # cgroup.procs files: "0" moves the writer
            os.write(f, b"0")
        # In the sandbox's cgroup now: a cgroup namespace made here is rooted there, as the
        # supervisor's is.
        check(libc.unshare(CLONE_NEWCGROUP))
        for i, f in enumerate(stdio):
            os.dup2(f, i)
        for f in ns:  # uts, ipc, net, mnt (last: it moves root and cwd)
            check(libc.setns(f, 0))
        sock.detach()
        os.closerange(3, 1 << 20)
        os.chdir("/workspace")
        os.setsid()
        for res, n in ((resource.RLIMIT_CORE, 1), (resource.RLIMIT_NOFILE, 1024), (resource.RLIMIT_FSIZE, fsize)):
            resource.setrlimit(res, (n, n))
        for cap in range(64):
            if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0:
                break
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        check(libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0))  # the uid change cleared it; exec would set it
        check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
        check(libc.syscall(ctypes.c_long(nr["seccomp"]), ctypes.c_long(1), ctypes.c_long(0), ctypes.byref(fprog)))
        for d in made:
            os.makedirs(d, exist_ok=True)
        rnd = sys.modules.get("numpy.random")
        if rnd is not None:
            rnd.seed()

    def fork(into, fds):
        check(libc.setns(fds[7], CLONE_NEWPID))
        args = (ctypes.c_uint64 * 11)()
        args[0] = CLONE_PARENT | (CLONE_CHILD_SETTID if tid_addr else 0) | (CLONE_INTO_CGROUP if into else 0)
        args[2] = tid_addr
        args[10] = fds[8] if into else 0
        api.PyOS_BeforeFork()
        pid = libc.syscall(ctypes.c_long(435), ctypes.byref(args), ctypes.c_size_t(88))
        err = ctypes.get_errno()
        if pid == 0:
            api.PyOS_AfterFork_Child()
            return 0
        api.PyOS_AfterFork_Parent()
        if libc.setns(own_pidns, CLONE_NEWPID) < 0:
            os._exit(1)  # its next child would be born in this sandbox: end, to be started again
        if pid < 0:
            raise OSError(err, os.strerror(err))
        return pid

    while True:
        data, anc, _, _ = sock.recvmsg(256, _socket.CMSG_SPACE(16 * 4))
        if not data:
            os._exit(0)  # the worker is gone
        fds = array.array("i")
        for level, kind, d in anc:
            if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
                fds.frombytes(d[:len(d) - len(d) % fds.itemsize])
        fds = list(fds)
        try:
            op, uid, fsize, cg = data.split()
            if op != b"fork" or len(fds) < 9:
                raise ValueError("bad request")
            into = cg == b"into"
            pid = fork(into, fds)
        except (OSError, ValueError) as e:
            pid, reply = -1, b"error %s" % repr(e).encode()
        if pid == 0:
            try:
                enter(int(uid), int(fsize), fds[:8] if into else fds)
            except BaseException as e:
                os.write(1, b"runfleet zygote child: %s\n" % repr(e).encode())
                os._exit(1)
            return
        for f in fds:
            os.close(f)
        sock.send(b"pid %d" % pid if pid > 0 else reply)

_runfleet_zygote()
del _runfleet_zygote
import sys
exec(compile(sys.argv[1], "<string>", "exec"))
