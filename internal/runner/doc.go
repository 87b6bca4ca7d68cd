// Package runner lives one job's life, in this order: validate → claim → reserve the dispatch →
// create the sandbox → associate it → send the payload → read stdout and stderr into pages while
// it runs → destroy the sandbox → settle → ack. It also owns the fetch loops of a worker's queues
// and its slots.
//
// Invariants, each kept by a step that cannot be skipped:
//   - Nothing of a job enters a sandbox before its reservation is stored in Redis and the
//     sandbox's id is associated with it (lease.Reserve, lease.Associate).
//   - A delivery whose claim says unknown or record_lost settles unknown and never runs.
//   - The heartbeat extends the lease and signals progress to JetStream; when the lease's trust
//     window closes it kills the sandbox, and the job's context carries errLeaseLost, after which
//     the runner writes nothing more of the job.
//   - A job's message is acked only after its settlement is stored; a settlement that cannot be
//     stored leaves the message for redelivery, where the claim finds the reservation and settles
//     unknown.
//   - Pre-dispatch failures are counted in the record and settle error after MaxFailures, with
//     backoff between tries, instead of relying on JetStream's MaxDeliver.
package runner
