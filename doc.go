// Package runfleet is the Go client of a runfleet fleet: it publishes code-run jobs to NATS
// JetStream, follows their output pages and settlement, and cancels them.
//
// The wire types of one job live in package [github.com/runfleet/runfleet/job], and what every
// fleet process agrees on beyond one job (stream and consumer configurations, tenant policies,
// heartbeats) in package [github.com/runfleet/runfleet/protocol]; this package adds the
// transport. Any NATS client in any language can do the same by following docs/protocol.md. The
// module holds only these three packages, so a service that imports the client adds nats.go and
// little else to its go.mod; the worker, gateway and submit live in the nested module fleet.
//
// A [Client] is what a service needs: submit one job ([Client.Submit]) or a batch
// ([Client.SubmitMany]), run one and wait ([Client.Run], or [Client.Output] for its stdout and
// stderr too, as exec.Cmd.Output), look up, watch ([Client.Watch], or range over [Client.Pages]),
// cancel, redrive one job, and list settled jobs ([Client.Jobs] walks the pages). Every error
// about a job is a *[JobError] that names it, a job that did not succeed included. The
// operator's calls — making the streams, counting jobs, bulk redrives, storing exact bytes as a
// job — are an [Inspector]'s, whose NATS user needs more permissions. The v0.1 Client methods and
// functions for them remain for one release, deprecated.
//
// The examples connect with nats.Connect to $NATS_URL, else nats.DefaultURL, where
// `worker --dev` listens.
//
// Submitting is at most once per job id: the id is the JetStream dedup key, and the fleet keeps
// each job's record for days after it settled, so publishing the same id again never runs it twice.
//
// # A job is its tenant and its id
//
// A client acts for one tenant (Options.Tenant, default "default"): it publishes that tenant's
// jobs, and its calls by id (Lookup, Request, Settlement, Watch, Cancel, Redrive, the artifact
// calls) reach that tenant's job of the id and nothing else. Two tenants may use one id; their
// jobs are two jobs, on subjects that name the tenant (docs/protocol.md, version 3), and neither
// reads, follows, cancels or blocks the other. The operator's [Inspector] finds which tenants
// hold an id ([Inspector.Tenants]) and acts for any of them ([Inspector.Tenant]).
//
// # What a lookup can know
//
// The client sees what JetStream holds, never the fleet's Redis records. A job is known while its
// request is kept in the jobs stream or any of its results are stored: its request and its
// settlement for the job's record (the worker's --retention, 7 days by default), its output pages
// for protocol.StreamOptions.ResultsMaxAge (24 h by default, a per-message TTL). Past the pages' lifetime
// [Client.Settlement] still returns the settlement and a watch returns it with [ErrExpired]; past
// the record's, the id is [ErrNotFound], as one never used.
//
// [Client.Lookup], [Client.Settlement], [Client.Cancel] and [Client.Watch] therefore never wait for
// a job the fleet does not know, and find one by its subjects only: direct gets of the last message
// on the job's subject (any queue of the client's tenant), its settlement and its pages, a constant number of
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
