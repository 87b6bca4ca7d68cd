package runfleet

import (
	"context"
	"fmt"

	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// TenantUsage returns what tenant holds of the fleet's storage, as the workers count it
// (docs/protocol.md, "Tenants"): one request to the job index. ErrNoService when no worker
// serves it.
func (i *Inspector) TenantUsage(ctx context.Context, tenant string) (protocol.TenantUsage, error) {
	if !job.ValidTenant(tenant) {
		return protocol.TenantUsage{}, fmt.Errorf("tenant %q: %w", tenant, job.ErrInvalidTenant)
	}
	var out protocol.TenantUsage
	if err := i.c.request(ctx, protocol.UsageSubject(i.c.subjects), protocol.UsageRequest{Tenant: tenant}, &out); err != nil {
		return protocol.TenantUsage{}, fmt.Errorf("usage of tenant %s: %w", tenant, err)
	}
	return out, nil
}
