// Package lease keeps each job's record in Redis and is the judge of every transition of a job:
// claim, extend, reserve dispatch, associate sandbox, settle, release. Each transition is one Lua
// script that checks the record's state and the caller's fencing generation together; nothing is
// read in Go and written back.
//
// # Record and lease
//
// A job has a record (hash `<prefix>:job:<id>`, kept RecordTTL after its last write, 7 days by
// default) with its state — claimed, reserved, dispatched, lost, settled —, its generation, its
// pre-dispatch failure count and the digests of what was dispatched; and a lease (string
// `<prefix>:lease:<id>` = "<gen>:<owner>", expiring after TTL unless extended).
//
// Every claim takes a new generation: the record's next one, or the message's JetStream delivery
// count when that is larger. The generation is the fencing token: every later script succeeds
// only while the lease still reads "<gen>:<owner>", and every page and settlement is stamped with
// it (Runfleet-Attempt, the Nats-Msg-Ids of its writes, the artifacts' `<job>/<attempt>/` prefix).
//
// A generation is never handed out twice for one message, even when Redis loses the record (a
// restart without persistence, FLUSHDB, a deleted key) while a stale attempt still runs: each
// delivery is claimed at most once, so by induction every generation is at most its delivery's
// count, and a claim after a loss takes at least its own count, above every earlier delivery's.
// Otherwise the new attempt would write with the stale attempt's Nats-Msg-Ids and take the stale
// attempt's settlement, deduplicated, for its own. (A durable consumer deleted and made again
// restarts the delivery counts at 1 for every request the jobs stream kept: the worker then claims
// each message stored before the new consumer with a count of at least 2, package queue's
// Source.Deliveries.)
//
// # What a claim decides
//
//   - settled: the job already settled; ack the message, run nothing.
//   - held: another worker holds a live lease; leave the message to it.
//   - foreign: the record was first claimed from another job subject (the same id published on
//     another queue or tenant); reject the message, run nothing. A record keeps its subject.
//   - run: no earlier claim reserved a dispatch (no record on a first delivery, or state claimed);
//     the code provably never reached a sandbox, so it may run now.
//   - unknown: an earlier claim reserved a dispatch and no settlement was recorded; the code may
//     have run and its outcome is lost. Settle unknown; never run it again.
//   - record_lost: no record, but the message was delivered before and was stored before this
//     Redis's epoch began (the `<prefix>:epoch` key, set when the key space was first used). The
//     record may have existed and been lost (a restart without persistence, a failover), so the
//     job is treated as unknown too. A redelivered job stored after the epoch began and without a
//     record was never claimed, and runs.
//
// # Trust window
//
// A worker trusts its lease only until sent + TTL − Drift, measured on its own monotonic clock
// from the moment it sent the claim or the last successful extend. Redis counts the TTL from when
// it ran the script, which is later, so the local window closes first. The runner checks the
// window before every step with side effects (and stops the sandbox when it closes); the scripts
// re-check in Redis; and JetStream's expected-sequence headers fence what is stored, so a worker
// that stalled past its window (SIGSTOP, a long GC pause) finds every further write refused.
package lease
