package runner

import (
	"bytes"
	"io"

	"github.com/runfleet/runfleet/fleet/internal/bootstrap"
)

// compileStatus takes the first line of a compiling profile's stdout, which its bootstrap writes
// before any of the program's output (package bootstrap), and passes the rest on. Run writes each
// stream from one goroutine, and the status is read once Run returned.
type compileStatus struct {
	w    io.Writer
	line []byte
	done bool
	// error is set when the line said the code did not compile.
	error bool
}

func (c *compileStatus) Write(b []byte) (int, error) {
	n := len(b)
	if !c.done {
		i := bytes.IndexByte(b, '\n')
		if i < 0 && len(c.line)+len(b) <= len(bootstrap.StatusCompileError) {
			c.line = append(c.line, b...)
			return n, nil
		}
		if i < 0 {
			i = len(b) - 1
		}
		c.line = append(c.line, b[:i+1]...)
		c.done, b = true, b[i+1:]
		c.error = string(c.line) == bootstrap.StatusCompileError
		if !c.error && string(c.line) != bootstrap.StatusRun {
			// Not the bootstrap's line: kept as output rather than lost.
			if _, err := c.w.Write(c.line); err != nil {
				return 0, err
			}
		}
		if len(b) == 0 {
			return n, nil
		}
	}
	if _, err := c.w.Write(b); err != nil {
		return 0, err
	}
	return n, nil
}

// failed reports whether the bootstrap said the code did not compile; nil says no.
func (c *compileStatus) failed() bool { return c != nil && c.error }
