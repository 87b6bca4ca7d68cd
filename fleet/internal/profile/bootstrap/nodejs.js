// runfleet bootstrap for nodejs. Once its requires are done it writes "runfleet1 ready\n" to
// stdout (the provider reads it before any job exists) and waits. It reads one payload from stdin:
// a header line "runfleet1 <n>\n", then n bytes of JSON {"preload","code","args","files","env"},
// then leaves the rest of stdin to the program. Exact readSync calls keep the program's stdin
// unread. The job's env is set here, after the dispatch, never at the sandbox's start.
'use strict';
(function () {
  const fs = require('fs');
  const path = require('path');
  const Module = require('module');
  function readExact(n) {
    const buf = Buffer.alloc(n);
    let off = 0;
    while (off < n) {
      let got;
      try {
        got = fs.readSync(0, buf, off, n - off, null);
      } catch (e) {
        if (e.code === 'EAGAIN') continue;
        throw e;
      }
      if (got === 0) throw new Error('runfleet bootstrap: payload cut short');
      off += got;
    }
    return buf;
  }
  fs.writeSync(1, 'runfleet1 ready\n');
  let header = '';
  while (!header.endsWith('\n')) {
    if (header.length > 64) throw new Error('runfleet bootstrap: no payload');
    header += readExact(1).toString('latin1');
  }
  const [magic, n] = header.trim().split(' ');
  if (magic !== 'runfleet1') throw new Error('runfleet bootstrap: unknown payload version');
  const p = JSON.parse(readExact(Number(n)).toString('utf8'));
  Object.assign(process.env, p.env || {});
  for (const f of p.files || []) {
    const file = path.join('/workspace', f.path);
    fs.mkdirSync(path.dirname(file), { recursive: true });
    const fd = fs.openSync(file, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_TRUNC | fs.constants.O_NOFOLLOW, f.mode || 0o644);
    fs.writeSync(fd, Buffer.from(f.content || '', 'base64'));
    fs.closeSync(fd);
  }
  // preload and code share one module scope, as one program.
  const filename = '/workspace/main.js';
  const m = new Module(filename, null);
  m.filename = filename;
  m.paths = Module._nodeModulePaths('/workspace');
  process.argv = [process.argv[0], filename, ...(p.args || [])];
  require.main = m;
  m._compile((p.preload ? p.preload + '\n' : '') + p.code, filename);
})();
