package protocol_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

func TestServiceErrorIs(t *testing.T) {
	t.Parallel()
	sentinels := []error{job.ErrInvalidQuery, protocol.ErrNotFound, protocol.ErrNoSettlement,
		protocol.ErrNotRedrivable, protocol.ErrMayHaveRun}
	for _, tt := range []struct {
		name string
		err  protocol.ServiceError
		want error // the one sentinel it matches, or nil
	}{
		{"bad query", protocol.ServiceError{Code: 400, Reason: protocol.ReasonInvalidQuery}, job.ErrInvalidQuery},
		{"bad query of the index", protocol.ServiceError{Code: 400}, job.ErrInvalidQuery},
		{"not found", protocol.ServiceError{Code: 404, Reason: protocol.ReasonNotFound}, protocol.ErrNotFound},
		{"not settled", protocol.ServiceError{Code: 409, Reason: protocol.ReasonNotSettled}, protocol.ErrNoSettlement},
		{"not redrivable", protocol.ServiceError{Code: 409, Reason: protocol.ReasonNotRedrivable}, protocol.ErrNotRedrivable},
		{"may have run", protocol.ServiceError{Code: 409, Reason: protocol.ReasonMayHaveRun}, protocol.ErrMayHaveRun},
		{"unavailable", protocol.ServiceError{Code: 500, Reason: protocol.ReasonUnavailable}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, s := range sentinels {
				if got := errors.Is(&tt.err, s); got != (s == tt.want) {
					t.Errorf("errors.Is(%+v, %v) = %t, want %t", tt.err, s, got, s == tt.want)
				}
			}
		})
	}
}

// TestServiceErrorHeader: what a service writes is what the client reads, under the header names
// of the NATS services convention.
func TestServiceErrorHeader(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		err  protocol.ServiceError
		want nats.Header
	}{
		{"with a reason", protocol.ServiceError{Code: 409, Reason: protocol.ReasonMayHaveRun, Message: "confirm"},
			nats.Header{"Nats-Service-Error": {"confirm"}, "Nats-Service-Error-Code": {"409"}, "Runfleet-Reason": {"may_have_run"}}},
		{"without", protocol.ServiceError{Code: 400, Message: "bad status"},
			nats.Header{"Nats-Service-Error": {"bad status"}, "Nats-Service-Error-Code": {"400"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := tt.err.Header()
			if len(h) != len(tt.want) {
				t.Errorf("Header() = %v, want %v", h, tt.want)
			}
			for k := range tt.want {
				if got := h.Get(k); got != tt.want.Get(k) {
					t.Errorf("Header().Get(%q) = %q, want %q", k, got, tt.want.Get(k))
				}
			}
			if got := protocol.ErrorOf(h); got == nil || *got != tt.err {
				t.Errorf("ErrorOf(Header()) = %+v, want %+v", got, tt.err)
			}
		})
	}
	if got := protocol.ErrorOf(nats.Header{}); got != nil {
		t.Errorf("ErrorOf(no error) = %+v, want nil", got)
	}
}
