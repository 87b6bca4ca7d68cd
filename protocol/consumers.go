package protocol

import (
	"cmp"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/job"
)

// Metadata keys the fleet writes on the jobs stream and its consumers (docs/protocol.md,
// "Tenants"). A publisher's max_queued check finds a tenant's consumers by them.
const (
	// MetadataQueue and MetadataTenant mark a tenant consumer with the queue and tenant it serves.
	MetadataQueue  = "runfleet.queue"
	MetadataTenant = "runfleet.tenant"
	// MetadataHistoryUntil, on a tenant consumer, is a time (RFC 3339) before which its messages
	// may have been served by an earlier consumer: it was made while its queue's discovery
	// consumer replayed history.
	MetadataHistoryUntil = "runfleet.history_until"
)

// FirstMadeKey is the key, in the consumers bucket ([ConsumersBucketConfig]), that holds when
// the durable consumer named consumer was first made (RFC 3339): a consumer made later than that
// replaced one that may have served the stream's messages. It is created once and never
// rewritten (a create that finds it keeps what is there). Fleets before the bucket kept it in
// the jobs stream's metadata under the same key, where a stream update made from an older read
// of the configuration erased it; it is still read there, and copied into the bucket.
func FirstMadeKey(consumer string) string { return "runfleet.first_made." + consumer }

// TenantMadeKey is the key, in the consumers bucket, that says queue's tenant has had a consumer
// (its value: when it was first made): one missing now was lost, and is made again from the
// stream's start, whatever discovery has acked since.
func TenantMadeKey(queue, tenant string) string {
	return "runfleet.tenant_made." + queue + "." + tenant
}

// TenantsMadeFilter matches the [TenantMadeKey] of every tenant of queue.
func TenantsMadeFilter(queue string) string { return "runfleet.tenant_made." + queue + ".*" }

// ConsumersBucketConfig is the configuration of the consumers bucket: the markers of the durable
// consumers the fleet made, kept for as long as the bucket lives.
func ConsumersBucketConfig(s job.Subjects, replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      s.ConsumersBucket(),
		Description: "runfleet consumer markers (docs/protocol.md): when each durable consumer was first made",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	}
}

// ConsumerOptions configure a tenant consumer. Zero fields take the defaults named.
type ConsumerOptions struct {
	// AckWait is how long a delivery may go without an ack or in-progress signal before JetStream
	// redelivers it; default DefaultAckWait. Workers signal progress well inside it.
	AckWait time.Duration
	// MaxAckPending bounds the deliveries outstanding across the fleet; default
	// DefaultMaxAckPending.
	MaxAckPending int
}

// Defaults of [ConsumerOptions].
const (
	DefaultAckWait       = 30 * time.Second
	DefaultMaxAckPending = 10_000
)

// TenantConsumerConfig is the configuration of the durable consumer of queue's jobs of tenant:
// all of them, from the start of the stream (a worker that makes one moves its start), marked
// with [MetadataQueue] and [MetadataTenant].
func TenantConsumerConfig(s job.Subjects, queue, tenant string, o ConsumerOptions) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       s.TenantConsumer(queue, tenant),
		Description:   "runfleet workers of queue " + queue + ", tenant " + tenant,
		FilterSubject: s.TenantJobs(queue, tenant),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cmp.Or(o.AckWait, DefaultAckWait),
		MaxDeliver:    -1,
		MaxAckPending: cmp.Or(o.MaxAckPending, DefaultMaxAckPending),
		DeliverPolicy: jetstream.DeliverAllPolicy,
		Metadata:      map[string]string{MetadataQueue: queue, MetadataTenant: tenant},
	}
}

// DiscoveryConsumerConfig is the configuration of queue's discovery consumer: the headers of
// every job stored on the queue, delivered once to one worker, which makes the job's tenant
// consumer when there is none.
func DiscoveryConsumerConfig(s job.Subjects, queue string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       s.Discovery(queue),
		Description:   "runfleet tenant discovery of queue " + queue + ": job headers only",
		FilterSubject: s.QueueJobs(queue),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       DefaultAckWait,
		MaxDeliver:    -1,
		MaxAckPending: DefaultMaxAckPending,
		HeadersOnly:   true,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
}
