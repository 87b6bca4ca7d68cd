// Package lease keeps each job's record in Redis and is the judge of every transition of a job:
// claim, extend, reserve dispatch, associate sandbox, settle, release. Each transition is one Lua
// script that checks the record's state and the caller's fencing generation together; nothing is
// read in Go and written back.
//
// # Record and lease
//
// A job has a record (hash `<prefix>:{b<k>}:job:<id>`, kept RecordTTL after its last write, 7
// days by default) with its state — claimed, reserved, dispatched, lost, settled —, its
// generation, its pre-dispatch failure count and the digests of what was dispatched; and a lease
// (string `<prefix>:{b<k>}:lease:<id>` = "<gen>:<owner>", expiring after TTL unless extended).
//
// # Buckets
//
// k is the job's bucket, FNV-1a of its id modulo [keyspace.Buckets] (1024). `{b<k>}` is a Redis
// Cluster hash tag: a job's record, its lease and its bucket's epoch (`<prefix>:{b<k>}:epoch`)
// hash to one slot, so every script touches one slot and runs on a Cluster as on a single Redis;
// no script touches a key shared by all jobs. Package keyspace owns these names and the scripts
// (its doc.go has the whole keyspace and why the buckets are 1024); this package decides what the
// scripts' replies mean. The count and the hash are part of the key layout: changing either hides
// every stored record.
//
// Every claim takes a new generation: the record's next one, or the message's JetStream delivery
// count when that is larger. The generation is the fencing token: every later script succeeds
// only while the lease still reads "<gen>:<owner>", and every page and settlement is stamped with
// it (Runfleet-Attempt, the Nats-Msg-Ids of its writes, the artifacts' `<tenant>/<job>/<attempt>/` prefix).
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
//   - record_lost: no record, but the message was delivered before and was stored before its
//     bucket's epoch began (the bucket's epoch key, set by Init or by the first claim that finds
//     it missing). The record may have existed and been lost (a restart without persistence, a
//     failover), so the job is treated as unknown too. A redelivered job stored after the epoch
//     began and without a record was never claimed, and runs. The epoch lives beside the records
//     it vouches for: a Cluster shard that comes back empty starts new epochs for its own buckets
//     only, and jobs of the other shards are not touched.
//
// # Replicas
//
// Redis replicates asynchronously: a replica promoted by Sentinel or a Cluster failover may lack
// the master's last writes, and a job whose reservation it lacks would be claimed as never run
// (no record, stored after its bucket's epoch) and run twice. So with [Options.Replicas] set,
// Reserve sends `WAIT` right after reserve.lua in one pipeline on the job's master connection
// (WAIT cannot run in a script and counts its own connection's writes) and returns
// [ErrNotReplicated] when too few replicas hold the reservation; the caller then releases the job
// undispatched, and counts no failure: it is the fleet's durability rule unmet, not the job's
// (package runner claims nothing more until [Store.Replicated] says the replicas are back). A reservation a replica holds survives the failover that promotes it (Sentinel
// and Cluster both prefer the replica with the most of the stream), and its job settles unknown
// rather than run again. The release itself may be lost, or come after the lease ran out (a
// failover that outlasts the TTL), when release.lua refuses it: a record still at the holder's
// generation does not prove that no claim followed, since a second failover can lose a later
// claim and the settlement that claim stored. The record then stays in doubt, and the next claim
// (unknown) reads the job's settlement and passes the dispatch gate before the job may run: a
// job with any settlement is never re-opened. Debian's Redis 7.0 has no WAITAOF; AOF on the
// replicas covers a crash of both.
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
