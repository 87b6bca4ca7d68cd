// Package queue is runfleet's side of NATS JetStream: the durable pull consumer each queue shares
// across the fleet, and the result log a job's pages and settlement are stored in.
//
// JetStream is the doorbell and the result log; Redis (package lease) is the judge. What queue
// adds to the judgement is store-once fencing of results: every page and settlement of a
// dispatching attempt is published with the expected last sequence of the job's result subjects
// (Nats-Expected-Last-Subject-Sequence with -Subject `<prefix>.results.<job>.>`), chained from its
// previous write. Any other write to the job's results — a settlement by a worker that took over —
// breaks the chain, and every later write of the old attempt is refused. A settlement by a
// non-dispatching attempt expects no message on the settled subject, so a job settles once
// whoever races.
package queue
