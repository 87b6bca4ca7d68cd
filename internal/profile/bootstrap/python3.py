# runfleet bootstrap for python3. It reads one payload from stdin: a header line
# "runfleet1 <n>\n", then n bytes of JSON {"preload","code","args","files","env"}, then leaves the rest
# of stdin to the program. The job's env is set here, after the dispatch, never at the sandbox's
# start. It reads the payload with exact os.read calls so that nothing of the
# program's stdin is buffered away from it.
def _runfleet_main():
    import os, sys, json, base64
    def read_exact(n):
        chunks = []
        while n > 0:
            b = os.read(0, min(n, 1 << 20))
            if not b:
                raise SystemExit("runfleet bootstrap: payload cut short")
            chunks.append(b)
            n -= len(b)
        return b"".join(chunks)
    header = b""
    while not header.endswith(b"\n"):
        b = os.read(0, 1)
        if not b or len(header) > 64:
            raise SystemExit("runfleet bootstrap: no payload")
        header += b
    magic, n = header.split()
    if magic != b"runfleet1":
        raise SystemExit("runfleet bootstrap: unknown payload version")
    p = json.loads(read_exact(int(n)))
    os.environ.update(p.get("env") or {})
    sys.argv = ["/workspace/main.py"] + (p.get("args") or [])
    for f in p.get("files") or []:
        path = os.path.join("/workspace", f["path"])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, f.get("mode") or 0o644)
        with os.fdopen(fd, "wb") as out:
            out.write(base64.b64decode(f.get("content") or ""))
    return p.get("preload") or "", p["code"]

_runfleet_preload, _runfleet_code = _runfleet_main()
del _runfleet_main
_runfleet_scope = {"__name__": "__main__", "__builtins__": __builtins__}
try:
    if _runfleet_preload:
        exec(compile(_runfleet_preload, "<preload>", "exec"), _runfleet_scope)
    exec(compile(_runfleet_code, "<main>", "exec"), _runfleet_scope)
except SystemExit:
    raise
except BaseException as e:
    import sys, traceback
    traceback.print_exception(type(e), e, e.__traceback__.tb_next)
    sys.stderr.flush()
    raise SystemExit(1)
