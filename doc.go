// Package runfleet is the Go client of a runfleet fleet: it publishes code-run jobs to NATS
// JetStream, follows their output pages and settlement, and cancels them.
//
// The wire types live in package [github.com/runfleet/runfleet/job]; this package adds the
// transport. Any NATS client in any language can do the same by following PROTOCOL.md.
//
// Submitting is at most once per job id: the id is the JetStream dedup key, and the fleet keeps
// each job's record for days after it settled, so publishing the same id again never runs it twice.
package runfleet
