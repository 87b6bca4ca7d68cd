// Package e2e tests the worker binary in separate processes against a real JetStream and a real
// redis-server, where a process must die: kill -9 at each phase of a job, SIGSTOP past the lease,
// Redis restarted empty, NATS restarted, and a chaos run. "Ran at most once" is observed through
// the provider's dispatch log, not through the runner's own records.
package e2e
