// Package protocol is docs/protocol.md in Go: what every process of a runfleet fleet agrees on
// beyond one job's wire types (package [github.com/runfleet/runfleet/job]). The client, the
// gateway, the workers and submit all take these from here, and none defines them again:
//
//   - the streams, the artifacts bucket and their settings ([StreamConfigs], [EnsureStreams]),
//     the tenant and discovery consumers ([TenantConsumerConfig], [DiscoveryConsumerConfig]) and
//     the tenants and consumers buckets ([TenantsBucketConfig], [ConsumersBucketConfig]);
//   - the metadata keys on the jobs stream's consumers ([MetadataQueue], [MetadataTenant],
//     [MetadataHistoryUntil]) and the consumers bucket's keys ([FirstMadeKey], [TenantMadeKey]);
//   - a tenant's policy and its one decoder ([TenantPolicy], [DecodeTenantPolicy]), with the one
//     rule for an entry that does not decode: it counts as absent;
//   - a worker's [Heartbeat];
//   - the JetStream API prefix a connection speaks to ([APIPrefix]) and direct gets
//     ([DirectGetRequest], [ParseDirectGet]).
//
// It imports only the standard library, nats.go and package job, so that a fleet process and a
// service that imports the client share it at no cost. Stream management is the operator's: a
// service reaches it through [github.com/runfleet/runfleet.Inspector].
package protocol
