//go:build runfleet_supervisor

package main

import _ "embed"

// supervisorBin is the sandboxes' small static supervisor and container init
// (internal/cmd/sandboxinit),
// built by `make build` next to this file before the worker.
//
//go:embed runfleet-supervisor
var supervisorBin []byte
