// Package nop is a sandbox provider that runs nothing, for measuring the control plane alone
// (internal/cmd/cpbench). It is a benchmark tool: it isolates nothing, no worker links it, and
// no test of behaviour may use it in place of a real provider.
//
// A sandbox reads the payload in, as a bootstrap would, writes Stdout to its stdout and exits 0.
// Assign and Run keep the contract's once-only rules, so the runner takes the same path it takes
// with a real provider.
package nop

import (
	"context"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/sandbox"
)

var _ sandbox.Provider = (*Provider)(nil)

// Provider makes sandboxes that run nothing.
type Provider struct {
	// Stdout is what every sandbox writes to its stdout; empty, it writes nothing.
	Stdout []byte
	n      atomic.Int64
}

// Name implements sandbox.Provider.
func (*Provider) Name() string { return "nop" }

// Create implements sandbox.Provider.
func (p *Provider) Create(context.Context, sandbox.Shape) (sandbox.Sandbox, error) {
	return &Sandbox{id: "nop-" + strconv.FormatInt(p.n.Add(1), 10), out: p.Stdout}, nil
}

// Sandbox is one sandbox of a [Provider].
type Sandbox struct {
	id       string
	out      []byte
	assigned atomic.Bool
	ran      atomic.Bool
}

// ID implements sandbox.Sandbox.
func (s *Sandbox) ID() string { return s.id }

// Assign implements sandbox.Sandbox.
func (s *Sandbox) Assign(context.Context, sandbox.Job) error {
	if s.assigned.Swap(true) {
		return sandbox.ErrUsed
	}
	return nil
}

// Run implements sandbox.Sandbox.
func (s *Sandbox) Run(_ context.Context, stdin io.Reader, stdout, _ io.Writer) (sandbox.Exit, error) {
	if !s.assigned.Load() || s.ran.Swap(true) {
		return sandbox.Exit{}, sandbox.ErrUsed
	}
	start := time.Now()
	if _, err := io.Copy(io.Discard, stdin); err != nil {
		return sandbox.Exit{}, err
	}
	if len(s.out) > 0 {
		if _, err := stdout.Write(s.out); err != nil {
			return sandbox.Exit{Killed: true}, nil
		}
	}
	return sandbox.Exit{Usage: sandbox.Usage{Wall: time.Since(start)}}, nil
}

// Destroy implements sandbox.Sandbox.
func (*Sandbox) Destroy(context.Context) error { return nil }
