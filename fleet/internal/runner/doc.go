// Package runner lives one job's life, in this order: validate → claim → reserve the dispatch →
// take a sandbox (one made ahead by package pool, or one created now: [Options.Sandboxes]) →
// assign it the job's limits → associate it → send the payload → read stdout and stderr into
// pages while it runs → store the files its outputs match (package artifact) → destroy the
// sandbox → settle → ack. It also owns the fetch loops of a worker's queues and its slots.
//
// Invariants, each kept by a step that cannot be skipped:
//   - Nothing of a job enters a sandbox before its reservation is stored in Redis and the
//     sandbox's id is associated with it (lease.Reserve, lease.Associate).
//   - A delivery whose claim says unknown or record_lost settles unknown and never runs.
//   - The heartbeat extends the lease and signals progress to JetStream; when the lease's trust
//     window closes it kills the sandbox, and the job's context carries errLeaseLost, after which
//     the runner writes nothing more of the job but, when nothing was dispatched, the release
//     of its own reservation, which release.lua refuses once the lease ran out. The window
//     is watched by its own timer on the monotonic clock, so a Redis that never answers cannot
//     keep a sandbox past it.
//   - The heartbeat runs until the attempt gives its lease up (settled, released) or loses it, not
//     until the job's context ends: a job stopped by a cancel or a shutdown keeps its lease through
//     the kill, the artifact upload, the destroy and the settlement, however much longer than the
//     lease's TTL they take within the settle budget. Everything after the program's end runs on
//     the lease's context, which only a lease loss ends.
//   - A sandbox is destroyed on a bounded context of its own, so that a lease loss or a shutdown
//     leaves no cgroup, uid or container to the reaper.
//   - Nothing of the job (code, files, env) enters the sandbox before the dispatch is reserved
//     and associated: a sandbox is created from its shape only (profile, sizes, waiting limits),
//     before or after the job is known; Assign gives it the job's limits and identity, and the
//     payload carries the rest. A sandbox serves one job: the runner destroys it after Run, and
//     the provider refuses a second Assign or Run.
//   - Output is published for as long as the job may run plus the settle budget, never on a fixed
//     budget. The page policy: a page is cut at page_bytes, or when the oldest buffered byte has
//     waited job.PageInterval (150 ms), both streams at once; so output reaches watchers within
//     about 150 ms, a line every 100 ms for 5 minutes makes about 1,500 pages, and the default
//     max_pages (job.PagesNeeded of the timeout, 4,020 for 5 minutes) always holds such a job.
//   - A settlement for a job this attempt did not dispatch (unknown after a takeover, rejected,
//     expired, cancelled before start, error) counts what earlier attempts stored, and is fenced
//     on the last stored record, so a stale attempt writing in between makes it count again.
//   - Cancels are read through a JetStream ordered consumer that resumes after a reconnect, and
//     every delivery of a job on this worker (a redelivery may overlap the first) is cancelled.
//   - A job's message is acked only after its settlement is stored; a settlement that cannot be
//     stored leaves the message for redelivery, where the claim finds the reservation and settles
//     unknown.
//   - Artifacts are collected after the program ended, whatever its status, before the sandbox
//     is destroyed, while the lease holds; the settlement lists them, and before it is stored
//     every object of the job it does not list is removed (an unknown settlement after a
//     takeover lists none and removes the dead attempt's).
//   - Pre-dispatch failures are counted in the record and settle error after MaxFailures, with
//     backoff between tries, instead of relying on JetStream's MaxDeliver. A reservation too few
//     Redis replicas acknowledged is not one: the fleet's durability rule is unmet, so the job is
//     released uncounted and the claim loops wait until the replicas are back (durability.go),
//     unless Options.DispatchWithoutReplica.
package runner
