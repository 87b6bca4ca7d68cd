package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/fleet/internal/gateway"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
)

// TestHardening: the gateway process holds against slow and hostile clients — a body sent
// slowly, an event stream nobody reads, a Last-Event-ID that cannot apply, credentials in the
// NATS URL — and lets a browser follow a job through a signed URL.
func TestHardening(t *testing.T) {
	f := newFleet(t, gateway.Options{})
	f.startWorker()
	natsURL := strings.Replace(f.nats.URL, "nats://", "nats://gwuser:s3cret-pw@", 1)
	p := f.startBinary("--nats-url", natsURL, "--body-timeout", "1s", "--write-timeout", "2s", "--max-wait", "30s", "--signed-url-ttl", "5s")
	addr := strings.TrimPrefix(p.URL, "http://")

	t.Run("credentials are not logged", func(t *testing.T) {
		if strings.Contains(p.log.String(), "s3cret-pw") || strings.Contains(p.log.String(), "gwuser") {
			t.Errorf("the gateway's log shows the NATS URL's credentials:\n%s", p.log.String())
		}
		// The one-line error of a gateway that cannot connect names the URL too.
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		out, _ := exec.CommandContext(ctx, gatewayBin, "--api-key", "k", "--nats-url", "nats://gwuser:s3cret-pw@127.0.0.1:1").CombinedOutput()
		if strings.Contains(string(out), "s3cret-pw") || !strings.Contains(string(out), "unreachable") {
			t.Errorf("gateway with NATS unreachable said %q, want \"unreachable\" and no password", out)
		}
	})

	t.Run("a body sent slowly is cut", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		fmt.Fprintf(c, "POST /v1/jobs HTTP/1.1\r\nHost: %s\r\nX-Api-Key: %s\r\nContent-Length: 1000\r\n\r\n%s", addr, apiKey, `{"language":"py`)
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("15 bytes of a 1,000-byte body: no answer after %s: %v", time.Since(start).Round(time.Millisecond), err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout {
			t.Errorf("15 bytes of a 1,000-byte body: %d after %s, want 408", resp.StatusCode, time.Since(start).Round(time.Millisecond))
		}
	})

	// A job whose events are far more than the socket buffers hold.
	a := p.do(t, "POST", "/v1/jobs?wait=true", []byte(`{"language":"python3","limits":{"output_bytes":16777216},"code":"import sys\nfor i in range(12):\n    sys.stdout.write('x' * 1000000)"}`))
	var big struct {
		JobID  string `json:"job_id"`
		Status string
	}
	if err := json.Unmarshal(a.body, &big); a.code != http.StatusOK || err != nil || big.Status != "succeeded" {
		t.Fatalf("12 MB job = %d %s, want 200 succeeded", a.code, clipString(string(a.body)))
	}

	t.Run("a stalled event stream reader is let go", func(t *testing.T) {
		// A small receive buffer, and nothing read: the gateway's writes block.
		d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
			return rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET /v1/jobs/%s/events HTTP/1.1\r\nHost: %s\r\nX-Api-Key: %s\r\n\r\n", big.JobID, addr, apiKey)
		testenv.WaitFor(t, 30*time.Second, "the stream under way", func() bool { return p.waiting(t) == "1" })
		start := time.Now()
		testenv.WaitFor(t, 60*time.Second, "the stalled stream's request ended", func() bool { return p.waiting(t) == "0" })
		t.Logf("let go %s after the stream began", time.Since(start).Round(time.Millisecond))
	})

	t.Run("a Last-Event-ID that cannot apply is 400 at once", func(t *testing.T) {
		a := p.do(t, "POST", "/v1/jobs?wait=true", []byte(`{"language":"python3","code":"print('other')"}`))
		var other struct {
			JobID string `json:"job_id"`
		}
		if err := json.Unmarshal(a.body, &other); a.code != http.StatusOK || err != nil {
			t.Fatalf("POST = %d %s", a.code, a.body)
		}
		js, err := jetstream.New(f.nats.Conn())
		if err != nil {
			t.Fatal(err)
		}
		s, err := js.Stream(t.Context(), f.client.Subjects().ResultsStream())
		if err != nil {
			t.Fatal(err)
		}
		settled, err := s.GetLastMsgForSubject(t.Context(), f.client.Subjects().Settled("default", big.JobID))
		if err != nil {
			t.Fatal(err)
		}
		otherPage, err := s.GetLastMsgForSubject(t.Context(), f.client.Subjects().Page("default", other.JobID))
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name string
			seq  uint64
		}{
			{"the settlement's", settled.Sequence},
			{"past the stream's end", settled.Sequence + 1_000_000},
			{"another job's page", otherPage.Sequence},
		} {
			ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
			req, _ := http.NewRequestWithContext(ctx, "GET", p.URL+"/v1/jobs/"+big.JobID+"/events", nil)
			req.Header.Set("X-Api-Key", apiKey)
			req.Header.Set("Last-Event-ID", strconv.FormatUint(tc.seq, 10))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("Last-Event-ID %s: %v, want 400 at once", tc.name, err)
				cancel()
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			cancel()
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "invalid_last_event_id") {
				t.Errorf("Last-Event-ID %s (%d) = %d %s, want 400 invalid_last_event_id", tc.name, tc.seq, resp.StatusCode, b)
			}
		}
	})

	t.Run("a browser follows a job through a signed URL", func(t *testing.T) {
		a := p.do(t, "POST", "/v1/jobs?wait=true", []byte(`{"language":"python3","code":"print('for the browser')"}`))
		var job struct {
			JobID string `json:"job_id"`
		}
		json.Unmarshal(a.body, &job)
		a = p.do(t, "POST", "/v1/jobs/"+job.JobID+"/events-url", nil)
		var signed struct {
			URL       string    `json:"url"`
			ExpiresAt time.Time `json:"expires_at"`
		}
		if err := json.Unmarshal(a.body, &signed); a.code != http.StatusOK || err != nil || !strings.HasPrefix(signed.URL, "/v1/jobs/"+job.JobID+"/events?") {
			t.Fatalf("POST events-url = %d %s, want 200 and the job's events URL", a.code, a.body)
		}
		get := func(path string) (int, string) {
			resp, err := http.Get(p.URL + path) // no key: what a browser's EventSource sends
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		if code, b := get(signed.URL); code != http.StatusOK || !strings.Contains(b, "event: settled") {
			t.Errorf("GET signed URL = %d %q, want 200 and the events", code, b)
		}
		for _, tc := range []struct{ name, path string }{
			{"another job", strings.Replace(signed.URL, job.JobID, big.JobID, 1)},
			{"a forged signature", signed.URL[:len(signed.URL)-4] + "0000"},
			{"a later expiry", strings.Replace(signed.URL, "expires=", "expires=9", 1)},
			{"another route", strings.Replace(signed.URL, "/events?", "?", 1)},
		} {
			if code, b := get(tc.path); code != http.StatusUnauthorized {
				t.Errorf("signed URL for %s = %d %q, want 401", tc.name, code, b)
			}
		}
		testenv.WaitFor(t, 30*time.Second, "the signed URL expired", func() bool { return time.Now().After(signed.ExpiresAt.Add(time.Second)) })
		if code, b := get(signed.URL); code != http.StatusUnauthorized {
			t.Errorf("GET expired signed URL = %d %q, want 401", code, b)
		}
	})

	t.Run("every request log names its job", func(t *testing.T) {
		p.do(t, "POST", "/v1/sandbox/run", []byte(`{"language":"python3","code":"print(1)","preload":"","enable_network":true}`), "Content-Type", "application/json")
		// The request's line is written once its answer is sent.
		var jobID string
		testenv.WaitFor(t, 30*time.Second, "the request log of POST /v1/sandbox/run", func() bool {
			sc := bufio.NewScanner(strings.NewReader(p.log.String()))
			for sc.Scan() {
				var line struct {
					Msg, Route string
					JobID      *string `json:"job_id"`
				}
				if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "request" && line.Route == "POST /v1/sandbox/run" && line.JobID != nil {
					jobID = *line.JobID
					return true
				}
			}
			return false
		})
		if jobID == "" {
			t.Errorf("the request log of POST /v1/sandbox/run has an empty job_id:\n%s", p.log.String())
		}
	})
}
