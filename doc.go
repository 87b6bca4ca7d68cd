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
// request is kept in the jobs stream or any of its results are stored: its request and its
// settlement for the job's record (the worker's --retention, 7 days by default), its output pages
// for StreamOptions.ResultsMaxAge (24 h by default, a per-message TTL). Past the pages' lifetime
// [Client.Settlement] still returns the settlement and a watch returns it with [ErrExpired]; past
// the record's, the id is [ErrNotFound], as one never used.
//
// [Client.Lookup], [Client.Settlement], [Client.Cancel] and [Client.Watch] therefore never wait for
// a job the fleet does not know, and find one by its subjects only: direct gets of the last message
// on the job's subject (any queue and tenant), its settlement and its pages, a constant number of
// requests whatever the backlog, none through the JetStream API's request queue. A watch holds no
// consumer: it follows the results stream's republish of what it stored and reads what came before
// with batched direct gets (see [Client.WatchFrom]).
// A lookup made while another process is still publishing the id may return ErrNotFound: the job
// is known once [Client.Submit] has returned.
//
// A cancel is stored only for a known, unsettled job. The fleet also applies a cancel only to a
// job whose message was stored before it, so that a cancel stored by another client for an id no
// job had yet cannot cancel a job published later with that id. With streams on several nodes the
// two times come from the leaders' clocks: a cancel published in the same few milliseconds as its
// job may miss it.
package runfleet
