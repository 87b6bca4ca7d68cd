//go:build !runfleet_supervisor

package main

// supervisorBin is empty in a worker built without the runfleet_supervisor tag (`go install`,
// which cannot run the Makefile's step): its namespace sandboxes re-execute the worker itself as
// their supervisor, which works the same and starts slower.
var supervisorBin []byte
