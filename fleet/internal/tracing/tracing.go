// Package tracing sets up OpenTelemetry traces for the fleet's programs and carries a job's trace
// across NATS in its W3C traceparent header (job.HeaderTraceparent).
//
// Off by default: a program exports spans only when OTEL_EXPORTER_OTLP_ENDPOINT (or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) names an OTLP/HTTP receiver, and the exporter reads the
// other OTEL_* variables itself (headers, timeout, OTEL_BSP_*). Off, the global tracer provider
// stays OpenTelemetry's no-op: a span costs an allocation-free call, and a traceparent a job
// arrives with is still passed on, so that log lines name the caller's trace.
//
// Span names follow OpenTelemetry's messaging conventions, `{operation} {destination}`:
// `send runfleet.jobs.{queue}` where a job is published (the gateway), `process {queue}` where a
// worker runs one, with children claim, take, run, artifacts and settle.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Scope is the instrumentation scope of the fleet's spans.
const Scope = "github.com/runfleet/runfleet/fleet"

// Tracer is the fleet's tracer, from the global provider that [Setup] sets (no-op until then).
func Tracer() trace.Tracer { return otel.Tracer(Scope) }

// Enabled reports whether getenv names an OTLP endpoint, which turns tracing on.
func Enabled(getenv func(string) string) bool {
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup makes the global tracer provider export to the OTLP/HTTP endpoint the environment names,
// as service (OTEL_SERVICE_NAME overrides it), when [Enabled]; otherwise it changes nothing. The
// caller calls shutdown before exiting, which exports what is buffered.
func Setup(ctx context.Context, getenv func(string) string, service, version string) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(w3c)
	if !Enabled(getenv) {
		return func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName(service), semconv.ServiceVersion(version)))
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("OTel resource: %w", err)
	}
	if getenv("OTEL_SERVICE_NAME") != "" {
		res, _ = resource.Merge(res, resource.Environment())
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

// w3c is the propagation the protocol fixes (a job's traceparent, docs/protocol.md), whatever
// propagator the process sets globally.
var w3c = propagation.TraceContext{}

// Carrier carries a trace context in a NATS message's header, whose keys are case-sensitive
// (traceparent, tracestate as W3C writes them), unlike propagation.HeaderCarrier's.
type Carrier nats.Header

var _ propagation.TextMapCarrier = Carrier{}

func (c Carrier) Get(key string) string { return nats.Header(c).Get(key) }
func (c Carrier) Set(key, value string) { nats.Header(c).Set(key, value) }
func (c Carrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// Header is the trace context of ctx as a job message's header (nil when ctx has none), for
// runfleet.SubmitOptions.Header.
func Header(ctx context.Context) nats.Header {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	h := nats.Header{}
	w3c.Inject(ctx, Carrier(h))
	return h
}

// FromHeader is ctx with the remote trace context h carries, if any.
func FromHeader(ctx context.Context, h nats.Header) context.Context {
	return w3c.Extract(ctx, Carrier(h))
}

// Messaging are the attributes of OpenTelemetry's messaging conventions for an operation of kind
// (send, process) on a job message of subject (its destination), id the job's id.
func Messaging(operation, subject, id string) []attribute.KeyValue {
	return []attribute.KeyValue{
		semconv.MessagingSystemKey.String("nats"),
		semconv.MessagingOperationTypeKey.String(operation),
		semconv.MessagingOperationName(operation),
		semconv.MessagingDestinationName(subject),
		semconv.MessagingMessageID(id),
	}
}

// End ends span, marking it failed with err when err is not nil.
func End(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// TraceID is the trace id of ctx's span, "" when it has none: the log key trace_id.
func TraceID(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		return sc.TraceID().String()
	}
	return ""
}

// FromHTTP is ctx with the trace context an HTTP request's header h carries, if any.
func FromHTTP(ctx context.Context, h http.Header) context.Context {
	return w3c.Extract(ctx, propagation.HeaderCarrier(h))
}
