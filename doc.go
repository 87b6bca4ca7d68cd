// Package runfleet is the Go client of a runfleet fleet: it publishes code-run jobs to NATS
// JetStream, follows their output pages and settlement, and cancels them.
//
// The wire types live in package [github.com/runfleet/runfleet/job]; this package adds the
// transport. Any NATS client in any language can do the same by following docs/protocol.md. The
// module holds only these two packages, so a service that imports the client adds nats.go and
// little else to its go.mod; the worker, gateway and submit live in nested modules.
//
// Submitting is at most once per job id: the id is the JetStream dedup key, and the fleet keeps
// each job's record for days after it settled, so publishing the same id again never runs it twice.
//
// # What a lookup can know
//
// The client sees what JetStream holds, never the fleet's Redis records. A job is known while its
// message waits in the jobs stream or while any of its results (pages, settlement) are stored —
// for the results stream's MaxAge, 24 h by default. Past that, nats-server leaves a marker on the
// job's result subjects (StreamOptions.ExpiryMarkers, 6 days by default, on streams this package
// created), and lookups return [ErrExpired]; once the markers are gone too, an old id cannot be
// told from one never used and is [ErrNotFound], although the fleet still refuses to run it again
// for as long as it keeps the job's record (7 days by default).
//
// [Client.Settlement], [Client.Cancel] and [Client.Watch] therefore never wait for a job the fleet
// does not know. Finding a job that waits in the queue reads the waiting messages (JetStream has
// no lookup by Nats-Msg-Id): the newest message of each queue first, then one request per
// waiting job, made only when no result is stored.
// A lookup made while another process is still publishing the id may return ErrNotFound: the job
// is known once [Client.Submit] has returned.
//
// A cancel is stored only for a known, unsettled job. The fleet also applies a cancel only to a
// job whose message was stored before it, so that a cancel stored by another client for an id no
// job had yet cannot cancel a job published later with that id. With streams on several nodes the
// two times come from the leaders' clocks: a cancel published in the same few milliseconds as its
// job may miss it.
package runfleet
