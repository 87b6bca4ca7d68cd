package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/runfleet/runfleet/job"
)

// QueuesKey is the reserved key of the tenants bucket that declares the fleet's queues
// (docs/protocol.md, "Declared queues"): one JSON object, [Queues], with its one decoder
// [DecodeQueues]. While the bucket holds no such key the fleet declares none, and every queue
// its workers serve is declared.
const QueuesKey = "_queues"

// Queues declares which queues exist and which tenants may use each. Queue default is always
// declared; its own entry may still name its tenants.
type Queues struct {
	Queues map[string]QueueDeclaration `json:"queues"`
}

// QueueDeclaration is one declared queue. No tenants means every tenant.
type QueueDeclaration struct {
	Tenants []string `json:"tenants,omitempty"`
}

// Bounds of the declarations: one bucket value.
const MaxQueuesBytes = MaxTenantPolicyBytes

// ErrInvalidQueues is the error of declarations that [DecodeQueues] or [Queues.Validate] refuses.
var ErrInvalidQueues = errors.New("invalid queue declarations")

// ErrUnknownQueue is the error of a job on a queue the fleet does not declare, or declares for
// other tenants only (reason unknown_queue). The client module's root package names the same
// value (runfleet.ErrUnknownQueue).
var ErrUnknownQueue = errors.New("unknown queue")

// Validate reports what is wrong with q, if anything.
func (q Queues) Validate() error {
	for name, d := range q.Queues {
		if !job.ValidQueue(name) {
			return fmt.Errorf("%w: queue %q is not a valid queue name", ErrInvalidQueues, name)
		}
		for _, t := range d.Tenants {
			if !job.ValidTenant(t) {
				return fmt.Errorf("%w: queue %s: tenant %q is not a valid tenant name", ErrInvalidQueues, name, t)
			}
		}
	}
	return nil
}

// DecodeQueues reads and validates the value of [QueuesKey], the only decoder of one. Unknown
// fields are refused, as a tenant policy's are.
func DecodeQueues(b []byte) (Queues, error) {
	if len(b) > MaxQueuesBytes {
		return Queues{}, fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidQueues, len(b), MaxQueuesBytes)
	}
	var q Queues
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&q); err != nil {
		return Queues{}, fmt.Errorf("%w: %w", ErrInvalidQueues, err)
	}
	if d.More() {
		return Queues{}, fmt.Errorf("%w: trailing data after the JSON object", ErrInvalidQueues)
	}
	if err := q.Validate(); err != nil {
		return Queues{}, err
	}
	return q, nil
}

// QueueAllowed reports, as an error wrapping [ErrUnknownQueue], whether tenant may store a job on
// queue: the one rule of declared queues, applied by the gateway and the client before storing
// and by the workers before running. declared is the fleet's declarations, nil while it has none;
// then a queue is declared when served says a worker serves it, and default always is.
func QueueAllowed(declared *Queues, served func(queue string) bool, queue, tenant string) error {
	if declared == nil {
		if queue == job.DefaultQueue || served(queue) {
			return nil
		}
		return fmt.Errorf("queue %s: no worker serves it and the fleet declares no queues: %w", queue, ErrUnknownQueue)
	}
	d, ok := declared.Queues[queue]
	switch {
	case !ok && queue != job.DefaultQueue:
		return fmt.Errorf("queue %s is not declared: %w", queue, ErrUnknownQueue)
	case len(d.Tenants) > 0 && !slices.Contains(d.Tenants, tenant):
		// Said as an undeclared queue is: a tenant learns nothing of the queues of others.
		return fmt.Errorf("queue %s is not declared: %w", queue, ErrUnknownQueue)
	}
	return nil
}
