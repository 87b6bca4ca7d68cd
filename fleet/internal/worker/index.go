package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/jobindex"
	"github.com/runfleet/runfleet/job"
)

// rebuildIndex adds the row of every settlement kept to the job index and writes the counts to
// c.Output.
func rebuildIndex(ctx context.Context, js jetstream.JetStream, subjects job.Subjects, rdb redis.UniversalClient, c Config) error {
	insp, err := runfleet.NewInspector(nil, runfleet.InspectorOptions{Prefix: c.Prefix, JetStream: js})
	if err != nil {
		return err
	}
	index := jobindex.New(rdb, jobindex.Options{Prefix: c.Prefix, Retention: c.Retention})
	got, err := index.Rebuild(ctx, js, subjects, func(ctx context.Context, tenant, id string) (string, error) {
		client, err := insp.Tenant(tenant)
		if err != nil {
			return "", err
		}
		req, err := client.Request(ctx, id)
		if errors.Is(err, runfleet.ErrNotFound) {
			return "", fmt.Errorf("%w: %w", jobindex.ErrUnplaced, err)
		}
		return req.Queue, err
	})
	fmt.Fprintf(c.Output, "job index: %d settlements read, %d rows added, %d without their request, %d past the retention\n",
		got.Settlements, got.Rows, got.Unplaced, got.Expired)
	return err
}
