// Package job holds the wire types of the runfleet protocol (docs/protocol.md, version 1): the job
// request a service publishes, the headers of an output page, the settlement every job ends with,
// and the names of the subjects and streams that carry them.
//
// It imports only the standard library so that every layer — the public client, the queue, the
// runner, the providers — can share it without cycles, and so that a service in another module can
// depend on it alone.
//
// Validation lives here too because it is part of the contract: a request that [Decode] refuses is
// settled `rejected` with the [RejectError]'s reason, never clamped or repaired.
package job
