package jobindex_test

import (
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/jobindex"
	"github.com/runfleet/runfleet/protocol"
)

// TestUsage: a tenant's kept requests count for the retention and its artifacts for their TTL,
// per tenant, and what is past its time is no longer counted.
func TestUsage(t *testing.T) {
	t.Parallel()
	x := newIndex(t, jobindex.Options{Retention: 48 * time.Hour, ArtifactTTL: 3 * time.Hour})
	ctx := t.Context()
	now := time.Now()
	for _, c := range []struct {
		tenant string
		at     time.Time
		bytes  int64
	}{
		{"acme", now, 100},
		{"acme", now.Add(-time.Hour), 200},
		{"acme", now.Add(-47 * time.Hour), 400}, // kept: within the retention
		{"acme", now.Add(-60 * time.Hour), 800}, // past the retention
		{"bravo", now, 1},
	} {
		if err := x.Kept(ctx, c.tenant, c.at, c.bytes); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		at    time.Time
		bytes int64
	}{{now, 10}, {now.Add(-2 * time.Hour), 20}, {now.Add(-5 * time.Hour), 40}} {
		if err := x.ArtifactsStored(ctx, "acme", c.at, c.bytes); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]protocol.TenantUsage{
		"acme":  {KeptBytes: 700, JobsKept: 3, ArtifactBytes: 30},
		"bravo": {KeptBytes: 1, JobsKept: 1},
		"gamma": {},
	}
	for range 2 { // the second read follows the first's trim
		for tenant, w := range want {
			if got, err := x.Usage(ctx, tenant); err != nil || got != w {
				t.Errorf("Usage(%s) = %+v, %v; want %+v", tenant, got, err, w)
			}
		}
	}
}
