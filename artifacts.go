package runfleet

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/runfleet/runfleet/job"
)

// ErrNoArtifact is returned by [Client.OpenArtifact] for a path the job's settlement does not list.
var ErrNoArtifact = errors.New("no such artifact")

// Artifacts returns the files job id's settlement lists as kept from its outputs: nil when the
// request named no outputs, empty when nothing matched. It returns [ErrNoSettlement] while the
// job is not settled: before that, nothing says which stored objects will stand.
func (c *Client) Artifacts(ctx context.Context, id string) ([]job.Artifact, error) {
	st, err := c.Settlement(ctx, id)
	if err != nil {
		return nil, err
	}
	return st.Artifacts, nil
}

// OpenArtifact opens the artifact at path (relative to the job's /workspace) of settled job id.
// The caller closes it; reading it to its end checks the object store's digest.
func (c *Client) OpenArtifact(ctx context.Context, id, path string) (io.ReadCloser, error) {
	arts, err := c.Artifacts(ctx, id)
	if err != nil {
		return nil, err
	}
	for _, a := range arts {
		if a.Path != path {
			continue
		}
		store, err := c.js.ObjectStore(ctx, c.subjects.ArtifactsBucket())
		if err != nil {
			return nil, fmt.Errorf("artifact %s of %s: %w", path, id, err)
		}
		r, err := store.Get(ctx, a.Object)
		if err != nil {
			return nil, fmt.Errorf("artifact %s of %s: %w", path, id, err)
		}
		return r, nil
	}
	return nil, fmt.Errorf("artifact %s of %s: %w", path, id, ErrNoArtifact)
}
