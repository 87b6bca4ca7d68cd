// Package queue is runfleet's side of NATS JetStream: the durable pull consumers the fleet shares
// (one per queue and tenant, fetched through a worker's [Puller]), and the result log a job's
// pages and settlement are stored in.
//
// The jobs stream keeps every request for the retention, served or not (Limits retention, one
// message per job subject): an ack moves the consumer on and removes nothing, and a message that
// no settlement can name is deleted. A consumer lost (deleted, gone with its server) is made again
// from the stream's start, so that nothing it held is skipped; the consumers bucket's markers, each
// created once, say that the new one is not the first ([RemakeTenantConsumer], [Made]), and every
// message stored before it is claimed as a possible redelivery and acked, without running, when
// its settlement is already stored.
//
// JetStream is the doorbell and the result log; Redis (package lease) is the judge. What queue
// adds to the judgement is store-once fencing of results: every page and settlement of a
// dispatching attempt is published with the expected last sequence of the job's result subjects
// (Nats-Expected-Last-Subject-Sequence with -Subject `<prefix>.results.<tenant>.<job>.>`), chained from its
// previous write. Any other write to the job's results — a settlement by a worker that took over —
// breaks the chain, and every later write of the old attempt is refused. A settlement by a
// non-dispatching attempt expects no message on the settled subject, so a job settles once
// whoever races.
package queue
