package runfleet

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// The v0.1 names of the fleet's stream management, kept for one release.

// StreamOptions are the settings of the streams a fleet creates when they are missing.
//
// Deprecated: use [protocol.StreamOptions].
type StreamOptions = protocol.StreamOptions

// Defaults of the worker's --artifacts-max-bytes, --jobs-max-bytes and --retention.
//
// Deprecated: use protocol.DefaultArtifactsMaxBytes, protocol.DefaultJobsMaxBytes and
// protocol.DefaultRetention.
const (
	DefaultArtifactsMaxBytes = protocol.DefaultArtifactsMaxBytes
	DefaultJobsMaxBytes      = protocol.DefaultJobsMaxBytes
	DefaultRetention         = protocol.DefaultRetention
)

// StreamConfigs returns the configurations of the three streams of s.
//
// Deprecated: use [protocol.StreamConfigs].
func StreamConfigs(s job.Subjects, o StreamOptions) []jetstream.StreamConfig {
	return protocol.StreamConfigs(s, o)
}

// EnsureStreams creates the streams of s that are missing.
//
// Deprecated: use [Inspector.EnsureStreams], or [protocol.EnsureStreams] with a JetStream of
// your own.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, s job.Subjects, o StreamOptions) error {
	return protocol.EnsureStreams(ctx, js, s, o)
}
