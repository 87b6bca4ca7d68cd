//go:build !runfleet_supervisor

package main

// supervisorBin is empty in a worker built without the runfleet_supervisor tag (`go install`,
// which cannot run the Makefile's step): its sandboxes run the worker's own executable as their
// supervisor or container init, which works the same and starts slower.
var supervisorBin []byte
