package vmtest

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// moduleOrder returns the files of the modules named and of everything they depend on, each after
// its dependencies. Debian's kernel package ships no modules.dep (depmod writes it when the
// package is installed, which it never is here), so the dependencies come from each module's
// .modinfo section.
func moduleOrder(dir string, names ...string) ([]string, error) {
	files := map[string]string{} // module name → file
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(path, ".ko") {
			files[modName(strings.TrimSuffix(d.Name(), ".ko"))] = path
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	var order []string
	seen := map[string]bool{}
	var visit func(name string) error
	visit = func(name string) error {
		name = modName(name)
		if seen[name] {
			return nil
		}
		seen[name] = true
		file, ok := files[name]
		if !ok {
			return fmt.Errorf("module %s: not under %s", name, dir)
		}
		deps, err := modDepends(file)
		if err != nil {
			return err
		}
		for _, d := range deps {
			if err := visit(d); err != nil {
				return err
			}
		}
		order = append(order, file)
		return nil
	}
	for _, n := range names {
		if err := visit(n); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// modName is the kernel's spelling of a module name, which file names may write with '-'.
func modName(s string) string { return strings.ReplaceAll(s, "-", "_") }

func modDepends(file string) ([]string, error) {
	f, err := elf.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, fmt.Errorf("%s: no .modinfo", file)
	}
	data, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	for _, kv := range bytes.Split(data, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("depends=")); ok && len(v) > 0 {
			return strings.Split(string(v), ","), nil
		}
	}
	return nil, nil
}

// cpio writes an uncompressed initramfs in the "newc" format the kernel unpacks.
type cpio struct {
	w   io.Writer
	ino int
	err error
}

func (c *cpio) header(name string, mode, size int) {
	if c.err != nil {
		return
	}
	c.ino++
	// magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor, devminor, rdevmajor,
	// rdevminor, namesize, check
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, 1, 0, size, 0, 0, 0, 0, len(name)+1, 0)
	_, c.err = io.WriteString(c.w, hdr+name+"\x00"+pad(len(hdr)+len(name)+1))
}

func pad(n int) string { return strings.Repeat("\x00", (4-n%4)%4) }

func (c *cpio) dir(name string) { c.header(name, 0o040755, 0) }

func (c *cpio) file(name string, perm int, data []byte) {
	c.header(name, 0o100000|perm, len(data))
	if c.err == nil {
		_, c.err = c.w.Write(append(data, pad(len(data))...))
	}
}

// close writes the trailer and returns the first error.
func (c *cpio) close() error {
	c.header("TRAILER!!!", 0, 0)
	return c.err
}

// writeInitramfs writes an initramfs holding init and the modules in order, named so that
// their sorted order is the load order.
func writeInitramfs(path, init string, modules []string) error {
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	c := &cpio{w: out}
	for _, d := range []string{"dev", "proc", "sys", "modules"} {
		c.dir(d)
	}
	files := [][2]string{{"init", init}}
	for i, m := range modules {
		files = append(files, [2]string{fmt.Sprintf("modules/%02d-%s", i, filepath.Base(m)), m})
	}
	for _, f := range files {
		data, err := os.ReadFile(f[1])
		if err != nil {
			out.Close()
			return err
		}
		c.file(f[0], 0o755, data)
	}
	if err := c.close(); err != nil {
		out.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return out.Close()
}
