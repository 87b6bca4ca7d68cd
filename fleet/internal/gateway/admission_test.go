package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/gateway"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
)

// answer is one HTTP answer of the gateway process.
type answer struct {
	code   int
	header http.Header
	body   []byte
}

// do sends a request with the API key to the gateway process.
func (p *process) do(t testing.TB, method, path string, body []byte, hdr ...string) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, p.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Api-Key", apiKey)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	client := &http.Client{Timeout: 2 * time.Minute}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return answer{code: resp.StatusCode, header: resp.Header, body: b}
}

// waiting is the gateway process's runfleet_gateway_waiting.
func (p *process) waiting(t testing.TB) string {
	t.Helper()
	a := p.do(t, "GET", "/metrics", nil)
	for line := range strings.Lines(string(a.body)) {
		if v, ok := strings.CutPrefix(line, "runfleet_gateway_waiting "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// storedJobs is how many job messages the fleet's jobs stream holds.
func (f *fleet) storedJobs() uint64 {
	f.t.Helper()
	js, err := jetstream.New(f.nats.Conn())
	if err != nil {
		f.t.Fatal(err)
	}
	s, err := js.Stream(context.Background(), f.client.Subjects().JobsStream())
	if err != nil {
		f.t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	return info.State.Msgs
}

// TestAdmission: the gateway admits a waiting request before it stores its job. Past
// --max-waiting a waiting request is 503 with Retry-After and nothing is stored; a body that
// grows past the limit when stored is 400, never 503.
func TestAdmission(t *testing.T) {
	f := newFleet(t, gateway.Options{})
	const limit = 3
	p := f.startBinary("--max-waiting", "3")
	addr := strings.TrimPrefix(p.URL, "http://")
	conns := holdWaiting(t, addr, limit)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	testenv.WaitFor(t, time.Minute, "the requests waiting", func() bool { return p.waiting(t) == "3" })
	stored := f.storedJobs()
	if stored != limit {
		t.Fatalf("jobs stored = %d, want %d", stored, limit)
	}

	a := p.do(t, "POST", "/v1/jobs?wait=true&queue=idle", []byte(`{"id":"one-too-many","language":"python3","code":"print(1)"}`))
	var e struct{ Reason, Detail string }
	if a.code != http.StatusServiceUnavailable || a.header.Get("Retry-After") == "" || json.Unmarshal(a.body, &e) != nil || e.Reason != "too_many_waiting" {
		t.Errorf("request %d = %d %s (Retry-After %q), want 503 too_many_waiting with Retry-After", limit+1, a.code, a.body, a.header.Get("Retry-After"))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := f.client.Settlement(ctx, "one-too-many"); !errors.Is(err, runfleet.ErrNotFound) {
		t.Errorf("Settlement(one-too-many) = %v, want ErrNotFound: nothing stored", err)
	}

	a = p.do(t, "POST", "/v1/sandbox/run", []byte(`{"language":"python3","code":"print(1)","preload":"","enable_network":true}`), "Content-Type", "application/json")
	if a.code != http.StatusServiceUnavailable || a.header.Get("Retry-After") == "" || !bytes.Contains(a.body, []byte(`"code":-503`)) {
		t.Errorf("dify request over the limit = %d %s, want 503 code -503 with Retry-After", a.code, a.body)
	}
	if n := f.storedJobs(); n != stored {
		t.Errorf("jobs stored = %d after the refusals, want %d", n, stored)
	}

	// A request that does not wait is not bounded.
	if a := p.do(t, "POST", "/v1/jobs?queue=idle", []byte(`{"language":"python3","code":"print(1)"}`)); a.code != http.StatusAccepted {
		t.Errorf("POST without wait = %d %s, want 202", a.code, a.body)
	}
	stored++

	// Under the body limit as sent, over it as stored: every "<" becomes "\u003c".
	body := []byte(`{"language":"python3","code":"` + strings.Repeat("<", 400_000) + `","preload":"","enable_network":true}`)
	conns[0].Close()
	testenv.WaitFor(t, time.Minute, "a place free", func() bool { return p.waiting(t) == "2" })
	a = p.do(t, "POST", "/v1/sandbox/run", body, "Content-Type", "application/json")
	if a.code != http.StatusBadRequest || !bytes.Contains(a.body, []byte(`"code":-400`)) || !bytes.Contains(a.body, []byte("payload_too_large")) {
		t.Errorf("dify body of %d bytes that grows when stored = %d %s, want 400 code -400 payload_too_large", len(body), a.code, clipString(string(a.body)))
	}
	if n := f.storedJobs(); n != stored {
		t.Errorf("jobs stored = %d after the oversized request, want %d", n, stored)
	}
}
