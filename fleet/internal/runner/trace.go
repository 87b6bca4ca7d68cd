package runner

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/runfleet/runfleet/fleet/internal/tracing"
)

// traceProcess starts attempt a's span, `process {queue}`, a child of the trace its message
// carries (the publisher's `send` span), and names that trace in a's log lines. The steps of the
// attempt are its children ([step]).
func traceProcess(ctx context.Context, a *attempt) (context.Context, trace.Span) {
	ctx = tracing.FromHeader(ctx, a.m.Headers())
	ctx, span := tracing.Tracer().Start(ctx, "process "+a.q, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(tracing.Messaging("process", a.m.Subject(), a.id)...),
		trace.WithAttributes(attribute.String("runfleet.job.tenant", a.tenant), attribute.Int64("runfleet.job.delivery", int64(a.meta.NumDelivered))))
	if id := tracing.TraceID(ctx); id != "" {
		a.log = a.log.With("trace_id", id)
	}
	return ctx, span
}

// step starts the span of one step of an attempt: claim, take, run, artifacts, settle.
func step(ctx context.Context, name string) (context.Context, trace.Span) {
	return tracing.Tracer().Start(ctx, name)
}
