package protocol_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/runfleet/runfleet/protocol"
)

func TestDecodeTenantPolicy(t *testing.T) {
	t.Parallel()
	digest := strings.Repeat("ab", 32)
	tests := []struct {
		name    string
		entry   string
		want    protocol.TenantPolicy
		invalid bool
	}{
		{name: "empty object", entry: `{}`},
		{name: "every field", entry: `{"max_queued":10,"max_running":3,"weight":2.5,"api_keys_sha256":["` + digest + `"]}`,
			want: protocol.TenantPolicy{MaxQueued: 10, MaxRunning: 3, Weight: 2.5, APIKeysSHA256: []string{digest}}},
		{name: "misspelt bound", entry: `{"max_queue":10}`, invalid: true},
		{name: "negative max_queued", entry: `{"max_queued":-1}`, invalid: true},
		{name: "storage bounds", entry: `{"max_kept_bytes":1048576,"max_jobs_kept":100,"max_artifact_bytes":65536}`,
			want: protocol.TenantPolicy{MaxKeptBytes: 1 << 20, MaxJobsKept: 100, MaxArtifactBytes: 1 << 16}},
		{name: "negative max_kept_bytes", entry: `{"max_kept_bytes":-1}`, invalid: true},
		{name: "weight over the bound", entry: `{"weight":1001}`, invalid: true},
		{name: "short digest", entry: `{"api_keys_sha256":["abcd"]}`, invalid: true},
		{name: "trailing data", entry: `{} {}`, invalid: true},
		{name: "not JSON", entry: `max_queued=3`, invalid: true},
		{name: "too large", entry: `{"api_keys_sha256":[` + strings.Repeat(`"x",`, 5000) + `"x"]}`, invalid: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := protocol.DecodeTenantPolicy([]byte(tt.entry))
			if tt.invalid {
				if !errors.Is(err, protocol.ErrInvalidTenantPolicy) {
					t.Errorf("DecodeTenantPolicy(%.40s) error = %v, want ErrInvalidTenantPolicy", tt.entry, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("DecodeTenantPolicy(%.40s) error = %v", tt.entry, err)
			}
			if got.MaxQueued != tt.want.MaxQueued || got.MaxRunning != tt.want.MaxRunning || got.Weight != tt.want.Weight ||
				got.MaxKeptBytes != tt.want.MaxKeptBytes || got.MaxJobsKept != tt.want.MaxJobsKept || got.MaxArtifactBytes != tt.want.MaxArtifactBytes ||
				strings.Join(got.APIKeysSHA256, ",") != strings.Join(tt.want.APIKeysSHA256, ",") {
				t.Errorf("DecodeTenantPolicy(%.40s) = %+v, want %+v", tt.entry, got, tt.want)
			}
		})
	}
}

func TestAdmitsQueued(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		maxQueued int64
		queued    int64
		want      bool
	}{
		{name: "no bound", maxQueued: 0, queued: 1 << 40, want: true},
		{name: "below", maxQueued: 3, queued: 2, want: true},
		{name: "at", maxQueued: 3, queued: 3, want: false},
		{name: "over", maxQueued: 3, queued: 4, want: false},
	}
	for _, tt := range tests {
		p := protocol.TenantPolicy{MaxQueued: tt.maxQueued}
		if got := p.AdmitsQueued(tt.queued); got != tt.want {
			t.Errorf("%s: AdmitsQueued(%d) with max_queued %d = %v, want %v", tt.name, tt.queued, tt.maxQueued, got, tt.want)
		}
	}
}
