// Package tenant holds the fleet's tenants: their policies in the KV bucket RUNFLEET_TENANTS
// (docs/protocol.md, "Tenants"), a live view of them that every worker and gateway keeps, and the
// API keys that name a tenant at the gateway.
//
// A tenant is its job subject's token and nothing else. A policy (protocol.TenantPolicy, with
// its one decoder, which the Go client's max_queued check shares) is read from the bucket and
// watched: a put or a delete applies where it is watched as soon as the watch delivers it, within
// the 5 s that docs/protocol.md allows, and without a restart. A tenant with no entry takes the
// entry named "default", and with none of those, no limits; an entry that does not decode counts
// as none.
//
// Only the SHA-256 of an API key is stored; [Policies.ForKey] compares digests in constant time
// over every key of every tenant, so that how long it takes says nothing of which key came close.
//
// The bucket also holds the gateways' web view session state under reserved keys, which start
// with "_" and so are never a tenant's (protocol.IsReservedTenantKey): the session secret and,
// per identity, when a logout last ended its sessions, and the fleet's queue declarations
// (protocol.QueuesKey, written by [UpdateQueues]). [Policies] follows them with the policies; an
// unreadable declaration declares queue default only, so that a bad write fails closed.
package tenant
