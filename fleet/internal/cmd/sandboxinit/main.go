// Command sandboxinit is what a sandbox starts before its program, and nothing else: the
// namespace provider's supervisor and the starter of its zygotes ([namespace.Init]), the Docker
// provider's container init ([containerinit.Init]) and, re-executed in the sandbox through
// /proc/self/exe, the generic bootstrap of a language manifest ([bootstrap.Main]); built static
// (CGO_ENABLED=0) and small, so that a sandbox's pid 1 starts in a fraction of the time the
// worker's own binary, re-executed, takes. `make build` builds it and embeds it in the worker
// (build tag runfleet_supervisor), which writes it under supervise.DefaultDir with its hash
// checked and starts it; a worker built without the tag (`go install`) runs itself in every role.
package main

import (
	"os"

	"github.com/runfleet/runfleet/fleet/internal/bootstrap"
	"github.com/runfleet/runfleet/fleet/internal/providers/docker/containerinit"
	"github.com/runfleet/runfleet/fleet/internal/providers/namespace"
)

func main() {
	// Each returns only in a process not started in its role.
	namespace.Init()
	containerinit.Init()
	bootstrap.Main()
	os.Stderr.WriteString("sandboxinit: a sandbox's supervisor, container init or bootstrap, started by the worker\n")
	os.Exit(2)
}
