// Command nsinit is the namespace provider's sandbox supervisor alone ([namespace.Init]), built
// static (CGO_ENABLED=0) and small: a sandbox's pid 1 starts in a fraction of the time the
// worker's own binary, re-executed, takes. `make build` builds it and embeds it in the worker
// (build tag runfleet_supervisor), which writes it under supervise.DefaultDir with its hash
// checked and starts it; a worker built without the tag (`go install`) re-executes itself.
package main

import (
	"os"

	"github.com/runfleet/runfleet/internal/providers/namespace"
)

func main() {
	namespace.Init()
	// Init returns only in a process not started as a supervisor.
	os.Stderr.WriteString("nsinit: the namespace provider's sandbox supervisor, started by the worker\n")
	os.Exit(2)
}
