package testenv

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ObjectNames lists the names of the objects in store, sorted. nats.go's List watches the bucket
// until it has seen every entry and, under load, was seen waiting forever on a bucket whose
// objects were being deleted; each try is bounded, and a list that hangs is tried again.
func ObjectNames(t testing.TB, store jetstream.ObjectStore) []string {
	t.Helper()
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		list, err := store.List(ctx)
		cancel()
		switch {
		case errors.Is(err, jetstream.ErrNoObjectsFound):
			return nil
		case errors.Is(err, context.DeadlineExceeded) && try < 4:
			continue
		case err != nil:
			t.Fatalf("list objects: %v", err)
		}
		names := make([]string, 0, len(list))
		for _, o := range list {
			names = append(names, o.Name)
		}
		slices.Sort(names)
		return names
	}
}
