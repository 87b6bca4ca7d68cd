// Package gvisor runs each job in a Docker container under gVisor's runsc runtime: the
// container of package docker, with every hardening of it, whose system calls a user-space
// kernel (the Sentry) answers instead of the host's. dockerd must know runsc as a runtime:
// scripts/setup registers it in the daemon's configuration file in /etc/docker with
// --platform=ptrace (no /dev/kvm needed), --network=none and --oci-seccomp.
//
// Where a job sees something else than under runc, the Sentry answers: see docs/gvisor.md for
// each case of the conformance battery that answers differently, and why.
package gvisor

import (
	"cmp"
	"context"

	"github.com/runfleet/runfleet/fleet/internal/providers/docker"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
)

// DefaultRuntime is the name dockerd's configuration gives runsc.
const DefaultRuntime = "runsc"

// What runsc itself holds in a container's cgroup beside the job: the Sentry's and the gofer's
// threads and, on the ptrace platform, a stub process per address space with its threads (38
// host tasks and 19 MiB for an idle python3; 1,138 host tasks for a fork bomb at 64 processes,
// measured here).
const (
	runtimeTasks       = 64
	runtimeTasksPerPid = 24
	runtimeMemory      = 32 << 20
)

// Provider makes gVisor container sandboxes.
type Provider struct {
	*docker.Provider
}

var _ sandbox.Provider = (*Provider)(nil)

// New connects to the Docker daemon as [docker.New] does, and runs containers with o.Runtime,
// default [DefaultRuntime]: the daemon must have it.
func New(ctx context.Context, o docker.Options) (*Provider, error) {
	o.Runtime = cmp.Or(o.Runtime, DefaultRuntime)
	o.Traits = docker.RuntimeTraits{Tasks: runtimeTasks, TasksPerPid: runtimeTasksPerPid, Memory: runtimeMemory,
		// The host's pids cgroup counts the Sentry's threads too: the job's own processes are
		// bounded inside, where the Sentry enforces RLIMIT_NPROC.
		NprocFromShape: true,
		// runsc has no update command, and its Sentry reads a file it executes.
		NoUpdate: true, ExecNeedsRead: true, SeccompEPERMOnly: true}
	p, err := docker.New(ctx, o)
	if err != nil {
		return nil, err
	}
	return &Provider{p}, nil
}

// Differs are the cases of the conformance battery (package providertest) that answer
// differently under gVisor, with the reason; docs/gvisor.md has the whole table.
var Differs = map[string]string{
	"contract/default signal dispositions": "the Sentry's /proc/PID/status has no SigBlk and SigIgn lines to read",
	"contract/usage counts the job": "the job's own CPU clock is the Sentry's, which counts time in application mode as the " +
		"Sentry sees it; the usage reported is the host's CPU accounting of the container's cgroup, and on a loaded host " +
		"the first runs ahead of the second (294 ms measured against 300 ms of the job's clock)",
}

// Name is "gvisor".
func (p *Provider) Name() string { return "gvisor" }
