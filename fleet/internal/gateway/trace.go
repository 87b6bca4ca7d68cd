package gateway

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/trace"

	"github.com/runfleet/runfleet/fleet/internal/tracing"
)

// send starts the span of publishing job id of tenant on queue, `send runfleet.jobs.{queue}`, a
// child of the trace request r arrived with (its traceparent), and names the trace in r's log
// line. The publish carries it to the worker in the job's traceparent ([tracing.Header]). Its
// context outlives the request, as the publish does.
func (g *Gateway) send(r *http.Request, queue, tenant, id string) (context.Context, trace.Span) {
	ctx, span := tracing.Tracer().Start(context.WithoutCancel(r.Context()), "send "+g.subjects.Prefix()+".jobs."+queue,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(tracing.Messaging("send", g.subjects.Job(queue, tenant, id), id)...))
	if info, ok := r.Context().Value(requestInfoKey{}).(*requestInfo); ok {
		info.traceID = tracing.TraceID(ctx)
	}
	return ctx, span
}
