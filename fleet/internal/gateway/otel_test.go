package gateway_test

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/runfleet/runfleet/fleet/internal/gateway"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/fleet/internal/tracing"
)

// receivedSpan is one span an OTLP/HTTP export delivered.
type receivedSpan struct {
	service, name, trace, id, parent string
}

// receiver is an OTLP/HTTP trace receiver (POST /v1/traces, protobuf), as a collector serves it.
type receiver struct {
	mu    sync.Mutex
	spans []receivedSpan
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(b, &req)
	}
	if r.URL.Path != "/v1/traces" || err != nil {
		http.Error(w, "want an OTLP trace export", http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	for _, rs := range req.ResourceSpans {
		var service string
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				rc.spans = append(rc.spans, receivedSpan{service: service, name: s.Name, trace: hex.EncodeToString(s.TraceId),
					id: hex.EncodeToString(s.SpanId), parent: hex.EncodeToString(s.ParentSpanId)})
			}
		}
	}
	rc.mu.Unlock()
	b, _ = proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(b)
}

func (rc *receiver) of(trace string) []receivedSpan {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []receivedSpan
	for _, s := range rc.spans {
		if s.trace == trace {
			out = append(out, s)
		}
	}
	return out
}

// TestOneTraceAcrossGatewayAndWorker: a request sent with a traceparent (the caller's span) is
// one trace in an OTLP receiver: the gateway's `send {prefix}.jobs.default` under the caller's
// span, the worker process's `process default` under the send span (carried in the job's
// traceparent through JetStream), and claim, take, run, artifacts and settle under that.
func TestOneTraceAcrossGatewayAndWorker(t *testing.T) {
	rc := &receiver{}
	collector := httptest.NewServer(rc)
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL) // the worker process inherits it
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	shutdown, err := tracing.Setup(t.Context(), os.Getenv, "runfleet-gateway", "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		shutdown(context.Background())
		otel.SetTracerProvider(noop.NewTracerProvider())
	})
	f := newFleet(t, gateway.Options{})
	f.startWorker()

	const trace, caller = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	code, b := f.do("POST", "/v1/jobs?wait=true", apiKey, []byte(`{"language":"python3","code":"print(1)"}`),
		"traceparent", "00-"+trace+"-"+caller+"-01")
	if code != http.StatusOK {
		t.Fatalf("POST /v1/jobs?wait=true = %d %s, want 200", code, b)
	}
	names := []string{"send " + f.prefix + ".jobs.default", "process default", "claim", "take", "run", "artifacts", "settle"}
	var got map[string]receivedSpan
	testenv.WaitFor(t, 30*time.Second, "the job's spans from the gateway and the worker", func() bool {
		got = map[string]receivedSpan{}
		for _, s := range rc.of(trace) {
			got[s.name] = s
		}
		for _, n := range names {
			if _, ok := got[n]; !ok {
				return false
			}
		}
		return true
	})
	send, process := got[names[0]], got[names[1]]
	if send.service != "runfleet-gateway" || send.parent != caller {
		t.Errorf("send span %+v, want the gateway's, under the caller's span %s", send, caller)
	}
	if process.service != "runfleet-worker" || process.parent != send.id || send.id == "" {
		t.Errorf("process span %+v, want the worker's, under the send span %s", process, send.id)
	}
	for _, name := range names[2:] {
		if s := got[name]; s.service != "runfleet-worker" || s.parent != process.id {
			t.Errorf("%s span %+v, want the worker's, under process %s", name, s, process.id)
		}
	}
}
