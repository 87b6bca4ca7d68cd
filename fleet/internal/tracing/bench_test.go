package tracing_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/runfleet/runfleet/fleet/internal/tracing"
)

// BenchmarkJobSpans is the worker's tracing cost per job: a job's traceparent read, its process
// span and five steps, exported over OTLP/HTTP (to a receiver that discards) by the batch
// processor, whose CPU counts though it runs beside. Against the worker's CPU per job at the
// control plane's rate (docs/performance.md, 350–423 µs), the "on" row is the share tracing adds;
// "off" is the no-op provider every worker runs without an endpoint. cpu-ns/op is the process's
// CPU (getrusage), which a loaded machine inflates less than the wall time of ns/op.
func BenchmarkJobSpans(b *testing.B) {
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
	defer sink.Close()
	exp, err := otlptracehttp.New(b.Context(), otlptracehttp.WithEndpointURL(sink.URL))
	if err != nil {
		b.Fatal(err)
	}
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithMaxQueueSize(1<<20))) // none dropped: every span costs its export
	defer sdk.Shutdown(context.Background())
	h := nats.Header{"traceparent": []string{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	for _, tc := range []struct {
		name string
		tp   trace.TracerProvider
	}{{"off", noop.NewTracerProvider()}, {"on", sdk}} {
		b.Run(tc.name, func(b *testing.B) {
			tracer := tc.tp.Tracer(tracing.Scope)
			start := cpuTime()
			for b.Loop() {
				ctx := tracing.FromHeader(context.Background(), h)
				ctx, span := tracer.Start(ctx, "process default", trace.WithSpanKind(trace.SpanKindConsumer),
					trace.WithAttributes(tracing.Messaging("process", "runfleet.jobs.default.default.id", "id")...))
				for _, name := range []string{"claim", "take", "run", "artifacts", "settle"} {
					_, s := tracer.Start(ctx, name)
					s.End()
				}
				span.End()
			}
			if sdk, ok := tc.tp.(*sdktrace.TracerProvider); ok {
				sdk.ForceFlush(context.Background()) // the export's CPU is the job's too
			}
			b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is the CPU this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
