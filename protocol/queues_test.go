package protocol_test

import (
	"errors"
	"testing"

	"github.com/runfleet/runfleet/protocol"
)

func TestDecodeQueues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		value   string
		invalid bool
	}{
		{name: "none", value: `{"queues":{}}`},
		{name: "open and restricted", value: `{"queues":{"gpu":{"tenants":["acme"]},"batch":{}}}`},
		{name: "bad queue name", value: `{"queues":{"GPU":{}}}`, invalid: true},
		{name: "bad tenant name", value: `{"queues":{"gpu":{"tenants":["Acme"]}}}`, invalid: true},
		{name: "misspelt field", value: `{"queues":{"gpu":{"tenant":["acme"]}}}`, invalid: true},
		{name: "trailing data", value: `{} {}`, invalid: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := protocol.DecodeQueues([]byte(tt.value))
			if tt.invalid != errors.Is(err, protocol.ErrInvalidQueues) || (!tt.invalid && err != nil) {
				t.Errorf("DecodeQueues(%s) error = %v, want invalid %v", tt.value, err, tt.invalid)
			}
		})
	}
}

func TestQueueAllowed(t *testing.T) {
	t.Parallel()
	declared := &protocol.Queues{Queues: map[string]protocol.QueueDeclaration{
		"gpu":   {Tenants: []string{"acme"}},
		"batch": {},
	}}
	served := func(q string) bool { return q == "served" }
	tests := []struct {
		name          string
		declared      *protocol.Queues
		queue, tenant string
		want          bool
	}{
		{name: "no declarations, default", queue: "default", tenant: "acme", want: true},
		{name: "no declarations, served", queue: "served", tenant: "acme", want: true},
		{name: "no declarations, unserved", queue: "parking", tenant: "acme", want: false},
		{name: "declared for every tenant", declared: declared, queue: "batch", tenant: "bravo", want: true},
		{name: "declared for the tenant", declared: declared, queue: "gpu", tenant: "acme", want: true},
		{name: "declared for another tenant", declared: declared, queue: "gpu", tenant: "bravo", want: false},
		{name: "undeclared though served", declared: declared, queue: "served", tenant: "acme", want: false},
		{name: "default always", declared: declared, queue: "default", tenant: "bravo", want: true},
	}
	for _, tt := range tests {
		err := protocol.QueueAllowed(tt.declared, served, tt.queue, tt.tenant)
		if got := err == nil; got != tt.want || (err != nil && !errors.Is(err, protocol.ErrUnknownQueue)) {
			t.Errorf("%s: QueueAllowed(%s, %s) = %v, want allowed %v", tt.name, tt.queue, tt.tenant, err, tt.want)
		}
	}
}

func TestAdmitsStorage(t *testing.T) {
	t.Parallel()
	p := protocol.TenantPolicy{MaxKeptBytes: 1000, MaxJobsKept: 10, MaxArtifactBytes: 500}
	tests := []struct {
		name  string
		p     protocol.TenantPolicy
		u     protocol.TenantUsage
		req   int64
		bound string
	}{
		{name: "unbounded", u: protocol.TenantUsage{KeptBytes: 1 << 40, JobsKept: 1 << 30, ArtifactBytes: 1 << 40}, req: 100},
		{name: "room", p: p, u: protocol.TenantUsage{KeptBytes: 800, JobsKept: 9, ArtifactBytes: 499}, req: 200},
		{name: "kept bytes", p: p, u: protocol.TenantUsage{KeptBytes: 801}, req: 200, bound: "max_kept_bytes"},
		{name: "jobs kept", p: p, u: protocol.TenantUsage{JobsKept: 10}, req: 1, bound: "max_jobs_kept"},
		{name: "artifact bytes", p: p, u: protocol.TenantUsage{ArtifactBytes: 500}, req: 1, bound: "max_artifact_bytes"},
	}
	for _, tt := range tests {
		err := tt.p.AdmitsStorage("acme", tt.u, tt.req)
		var sf *protocol.StorageFullError
		switch {
		case tt.bound == "" && err != nil:
			t.Errorf("%s: AdmitsStorage = %v, want nil", tt.name, err)
		case tt.bound != "" && (!errors.As(err, &sf) || sf.Bound != tt.bound || !errors.Is(err, protocol.ErrStorageFull)):
			t.Errorf("%s: AdmitsStorage = %v, want %s", tt.name, err, tt.bound)
		}
	}
	if got := p.ArtifactRoom(protocol.TenantUsage{ArtifactBytes: 450}); got != 50 {
		t.Errorf("ArtifactRoom = %d, want 50", got)
	}
	if got := (protocol.TenantPolicy{}).ArtifactRoom(protocol.TenantUsage{ArtifactBytes: 450}); got != -1 {
		t.Errorf("ArtifactRoom unbounded = %d, want -1", got)
	}
}
