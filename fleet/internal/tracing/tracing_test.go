package tracing_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/runfleet/runfleet/fleet/internal/tracing"
	"github.com/runfleet/runfleet/job"
)

// TestTraceparentRoundTrip: the trace an HTTP request arrives with is written into a job's
// header under the protocol's lower-case key and read back from it, with no global propagator
// set and tracing off.
func TestTraceparentRoundTrip(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := tracing.FromHTTP(context.Background(), http.Header{"Traceparent": []string{tp}})
	h := tracing.Header(ctx)
	if got := h.Get(job.HeaderTraceparent); got != tp {
		t.Errorf("Header(ctx)[%s] = %q, want %q (header %v)", job.HeaderTraceparent, got, tp, h)
	}
	back := tracing.FromHeader(context.Background(), h)
	if got := tracing.TraceID(back); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("TraceID(FromHeader(h)) = %q, want the request's", got)
	}
	if h := tracing.Header(context.Background()); h != nil {
		t.Errorf("Header of a context with no trace = %v, want nil", h)
	}
}
