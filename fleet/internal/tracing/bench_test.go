package tracing_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
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

// sinkEnv, set, makes the test binary BenchmarkJobSpans' OTLP receiver: a process of its own, as a
// collector is, whose reading is not the worker's CPU.
const sinkEnv = "RUNFLEET_TEST_OTLP_SINK"

func TestMain(m *testing.M) {
	if os.Getenv(sinkEnv) != "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(ln.Addr())
		_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) }))
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// startSink starts a receiver that discards what it is sent, in a process of its own, and returns
// its address.
func startSink(b *testing.B) string {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), sinkEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatalf("OTLP sink: %v", err)
	}
	return "http://" + strings.TrimSpace(addr)
}

// BenchmarkJobSpans is the worker's tracing cost per job: a job's traceparent read, its process
// span and five steps, exported over OTLP/HTTP by the batch processor, whose CPU counts though it
// runs beside, to a receiver in another process that discards them. Against the worker's CPU per
// job at the control plane's rate (docs/performance.md, 350–423 µs), the "on" row is the share
// tracing adds; "off" is the no-op provider every worker runs without an endpoint. cpu-ns/op is
// the process's CPU (getrusage), which a loaded machine inflates less than the wall time of ns/op.
func BenchmarkJobSpans(b *testing.B) {
	exp, err := otlptracehttp.New(b.Context(), otlptracehttp.WithEndpointURL(startSink(b)))
	if err != nil {
		b.Fatal(err)
	}
	// Blocking: none dropped, every span costs its export; the queue is the default one a worker
	// has (a queue of a million spans made the collector scan it, a fifth of the CPU measured).
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBlocking()))
	defer sdk.Shutdown(context.Background())
	// What OTEL_TRACES_SAMPLER=parentbased_traceidratio with OTEL_TRACES_SAMPLER_ARG=0.25 sets up.
	quarter := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBlocking()),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.25))))
	defer quarter.Shutdown(context.Background())
	sampled := nats.Header{"traceparent": []string{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	for _, tc := range []struct {
		name string
		tp   trace.TracerProvider
		h    nats.Header
	}{
		{"off", noop.NewTracerProvider(), sampled},
		{"on", sdk, sampled},
		{"on-quarter-of-unsampled", quarter, nil}, // jobs that arrive with no trace: a quarter kept
	} {
		b.Run(tc.name, func(b *testing.B) {
			tracer := tc.tp.Tracer(tracing.Scope)
			start := cpuTime()
			for b.Loop() {
				ctx := tracing.FromHeader(context.Background(), tc.h)
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
