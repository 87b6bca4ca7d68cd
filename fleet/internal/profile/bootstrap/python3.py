# runfleet bootstrap for python3. Once its imports are done (those of the exit too) it writes
# "runfleet1 ready\n" to stdout, which the provider reads before any job exists, and waits. It
# reads one payload from stdin: a header line "runfleet1 <n>\n", then n bytes of JSON
# {"preload","code","args","files","env"}, then leaves the rest of stdin to the program. The
# job's env is set here, after the dispatch, never at the sandbox's start. It reads the payload
# with exact os.read calls so that nothing of the program's stdin is buffered away from it.
def _runfleet_main():
    # Only modules built into the interpreter: the json and base64 packages would import re and
    # struct, and double the interpreter's start. _json's C scanner decodes what Go's encoder makes.
    import os, sys, gc, io, atexit, binascii
    try:
        import _json
        class _Decoding:
            strict, object_hook, object_pairs_hook = True, None, None
            parse_float, parse_int, parse_constant = float, int, None
        scan = _json.make_scanner(_Decoding())
        def loads(b):
            s = b.decode("utf-8")
            v, end = scan(s, 0)
            if end != len(s):
                raise ValueError("runfleet bootstrap: trailing data in payload")
            return v
    except ImportError:
        from json import loads
    def read_exact(n):
        chunks = []
        while n > 0:
            b = os.read(0, min(n, 1 << 20))
            if not b:
                raise SystemExit("runfleet bootstrap: payload cut short")
            chunks.append(b)
            n -= len(b)
        return b"".join(chunks)
    os.write(1, b"runfleet1 ready\n")
    header = b""
    while not header.endswith(b"\n"):
        b = os.read(0, 1)
        if not b or len(header) > 64:
            raise SystemExit("runfleet bootstrap: no payload")
        header += b
    magic, n = header.split()
    if magic != b"runfleet1":
        raise SystemExit("runfleet bootstrap: unknown payload version")
    p = loads(read_exact(int(n)))
    os.environ.update(p.get("env") or {})
    sys.argv = ["/workspace/main.py"] + (p.get("args") or [])
    for f in p.get("files") or []:
        path = os.path.join("/workspace", f["path"])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, f.get("mode") or 0o644)
        with os.fdopen(fd, "wb") as out:
            out.write(binascii.a2b_base64(f.get("content") or ""))
    return p.get("preload") or "", p["code"]

def _runfleet_exit(code):
    # Ends the process at once with the exit status Python would give, skipping the interpreter's
    # finalization, but only when nothing could tell the difference: no atexit handler, no live
    # non-daemon thread, no open writable file but the standard streams (whose buffers are
    # flushed here). Otherwise it returns, and Python exits as usual.
    import sys, os, gc, io, atexit
    if code is None:
        code = 0
    if type(code) is bool:
        code = int(code)
    if type(code) is not int or not -(1 << 31) <= code < (1 << 31) or atexit._ncallbacks():
        return
    threading = sys.modules.get("threading")
    if threading and any(t is not threading.main_thread() and not t.daemon and t.is_alive() for t in threading.enumerate()):
        return
    std = []
    for s in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        while s is not None and s not in std:
            std.append(s)
            s = getattr(s, "buffer", None) or getattr(s, "raw", None)
    try:
        for o in gc.get_objects():
            if isinstance(o, io.IOBase) and not o.closed and o.writable() and not any(o is s for s in std):
                return
        for s in std:
            flush = getattr(s, "flush", None)
            if flush is not None:
                flush()
    except BaseException:
        return
    os._exit(code)

_runfleet_preload, _runfleet_code = _runfleet_main()
del _runfleet_main
_runfleet_scope = {"__name__": "__main__", "__builtins__": __builtins__}
try:
    if _runfleet_preload:
        exec(compile(_runfleet_preload, "<preload>", "exec"), _runfleet_scope)
    exec(compile(_runfleet_code, "<main>", "exec"), _runfleet_scope)
except SystemExit as e:
    _runfleet_exit(e.code)
    raise
except BaseException as e:
    import sys, traceback
    traceback.print_exception(type(e), e, e.__traceback__.tb_next)
    sys.stderr.flush()
    _runfleet_exit(1)
    raise SystemExit(1)
_runfleet_exit(0)
