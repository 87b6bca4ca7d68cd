// Package job holds the wire types of the runfleet protocol (docs/protocol.md, version 1): the job
// request a service publishes, the headers of an output page, the settlement every job ends with,
// and the names of the subjects and streams that carry them.
//
// It imports only the standard library so that every layer — the public client, the queue, the
// runner, the providers — can share it without cycles, and so that a service in another module can
// depend on it alone.
//
// Validation lives here too because it is part of the contract: a request that
// [Request.Validate] refuses is settled `rejected` with the [RejectError]'s reason, never clamped
// or repaired.
//
// A settlement's exit code is the wire's `exit_code`, which may be absent: Go code reads it with
// [Settlement.Exit] (or [Listed.Exit], [OutcomeError.Exit]) rather than through the pointer.
//
// A few functions the fleet's workers share are exported here for now and deprecated: [Decode],
// [ClipDetail], [ListedOf], [PagesNeeded], [MatchOutput], [ParseTime] and [ReservedHeader]. They
// are no promise of this module and move into the fleet in the next release.
package job
