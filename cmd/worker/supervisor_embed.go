//go:build runfleet_supervisor

package main

import _ "embed"

// supervisorBin is the namespace provider's small static supervisor (internal/supervise/nsinit),
// built by `make build` next to this file before the worker.
//
//go:embed runfleet-supervisor
var supervisorBin []byte
