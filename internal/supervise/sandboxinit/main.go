// Command sandboxinit is what a sandbox starts before its program, and nothing else: the
// namespace provider's supervisor ([namespace.Init]) and the Docker provider's container init
// ([containerinit.Init]), built static (CGO_ENABLED=0) and small, so that a sandbox's pid 1
// starts in a fraction of the time the worker's own binary, re-executed, takes. `make build`
// builds it and embeds it in the worker (build tag runfleet_supervisor), which writes it under
// supervise.DefaultDir with its hash checked and starts it; a worker built without the tag
// (`go install`) runs itself in both roles.
package main

import (
	"os"

	"github.com/runfleet/runfleet/internal/providers/docker/containerinit"
	"github.com/runfleet/runfleet/internal/providers/namespace"
)

func main() {
	// Each returns only in a process not started in its role.
	namespace.Init()
	containerinit.Init()
	os.Stderr.WriteString("sandboxinit: a sandbox's supervisor or container init, started by the worker\n")
	os.Exit(2)
}
