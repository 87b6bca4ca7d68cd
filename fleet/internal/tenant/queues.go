package tenant

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/protocol"
)

// Queues reads the fleet's queue declarations; ok is false while the bucket holds none.
func Queues(ctx context.Context, kv jetstream.KeyValue) (q protocol.Queues, ok bool, err error) {
	e, err := kv.Get(ctx, protocol.QueuesKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return protocol.Queues{}, false, nil
	}
	if err != nil {
		return protocol.Queues{}, false, fmt.Errorf("read queue declarations: %w", err)
	}
	if q, err = protocol.DecodeQueues(e.Value()); err != nil {
		return protocol.Queues{}, false, err
	}
	return q, true, nil
}

// UpdateQueues reads the fleet's queue declarations (none: an empty set), changes them with f and
// writes them back, again if another writer came in between. An error of f writes nothing.
func UpdateQueues(ctx context.Context, kv jetstream.KeyValue, f func(*protocol.Queues) error) (protocol.Queues, error) {
	for {
		var q protocol.Queues
		var rev uint64
		e, err := kv.Get(ctx, protocol.QueuesKey)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return protocol.Queues{}, fmt.Errorf("read queue declarations: %w", err)
		default:
			if q, err = protocol.DecodeQueues(e.Value()); err != nil {
				return protocol.Queues{}, err
			}
			rev = e.Revision()
		}
		if q.Queues == nil {
			q.Queues = map[string]protocol.QueueDeclaration{}
		}
		if err := f(&q); err != nil {
			return protocol.Queues{}, err
		}
		if err := q.Validate(); err != nil {
			return protocol.Queues{}, err
		}
		b, err := json.Marshal(q)
		if err != nil {
			return protocol.Queues{}, fmt.Errorf("encode queue declarations: %w", err)
		}
		if len(b) > protocol.MaxQueuesBytes {
			return protocol.Queues{}, fmt.Errorf("%w: %d bytes, at most %d", protocol.ErrInvalidQueues, len(b), protocol.MaxQueuesBytes)
		}
		if rev == 0 {
			_, err = kv.Create(ctx, protocol.QueuesKey, b)
		} else {
			_, err = kv.Update(ctx, protocol.QueuesKey, b, rev)
		}
		if errors.Is(err, jetstream.ErrKeyExists) || isWrongSequence(err) {
			continue
		}
		if err != nil {
			return protocol.Queues{}, fmt.Errorf("write queue declarations: %w", err)
		}
		return q, nil
	}
}
