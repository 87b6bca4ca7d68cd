package gateway_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/fleet/internal/gateway"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/job/jobtest"
)

// TestGateway runs every native route against one real fleet: embedded JetStream, a real
// redis-server and a real worker process with the namespace provider.
func TestGateway(t *testing.T) {
	f := newFleet(t, gateway.Options{})
	f.startWorker()

	t.Run("submit then get", func(t *testing.T) {
		code, ans := f.post("", `{"language":"python3","code":"print(6*7)"}`)
		if code != http.StatusAccepted {
			t.Fatalf("POST /v1/jobs = %d %v, want 202", code, ans)
		}
		id, _ := ans["job_id"].(string)
		if !job.ValidID(id) {
			t.Fatalf("job_id = %q, want a valid id", id)
		}
		f.settle(id)
		code, b := f.do("GET", "/v1/jobs/"+id, apiKey, nil)
		var st job.Settlement
		if code != http.StatusOK || json.Unmarshal(b, &st) != nil {
			t.Fatalf("GET /v1/jobs/%s = %d %s, want 200 and a settlement", id, code, b)
		}
		if st.JobID != id || st.Status != job.StatusSucceeded || st.StdoutBytes != 3 {
			t.Errorf("settlement = %+v, want %s succeeded with 3 stdout bytes", st, id)
		}
	})

	t.Run("submit with own id, twice", func(t *testing.T) {
		body := `{"id":"gw-own-id","language":"nodejs","code":"console.log(1+1)"}`
		for range 2 {
			if code, ans := f.post("?wait=true", body); code != http.StatusOK || ans["job_id"] != "gw-own-id" || ans["status"] != "succeeded" {
				t.Fatalf("POST ?wait=true = %d %v, want 200 succeeded gw-own-id", code, ans)
			}
		}
	})

	t.Run("wait returns the settlement", func(t *testing.T) {
		code, ans := f.post("?wait=true", `{"language":"python3","code":"import sys; print('out'); sys.exit(3)"}`)
		if code != http.StatusOK || ans["status"] != "failed" || ans["reason"] != "exit_nonzero" || ans["exit_code"] != 3.0 {
			t.Fatalf("POST ?wait=true = %d %v, want 200 failed exit_nonzero 3", code, ans)
		}
	})

	t.Run("get before settlement is 404", func(t *testing.T) {
		code, ans := f.post("?queue=nobody-serves", `{"language":"python3","code":"print(1)"}`)
		if code != http.StatusAccepted {
			t.Fatalf("POST = %d %v", code, ans)
		}
		code, b := f.do("GET", "/v1/jobs/"+ans["job_id"].(string), apiKey, nil)
		if code != http.StatusNotFound || !bytes.Contains(b, []byte(`"not_settled"`)) {
			t.Errorf("GET unsettled = %d %s, want 404 not_settled", code, b)
		}
	})

	t.Run("an unknown or settled job is said so", func(t *testing.T) {
		code, ans := f.post("?wait=true", `{"language":"python3","code":"print(1)"}`)
		if code != http.StatusOK {
			t.Fatalf("POST ?wait=true = %d %v", code, ans)
		}
		settled := ans["job_id"].(string)
		for _, tc := range []struct {
			method, path string
			code         int
			reason       string
		}{
			{"GET", "/v1/jobs/never-submitted", http.StatusNotFound, `"not_found"`},
			{"DELETE", "/v1/jobs/never-submitted", http.StatusNotFound, `"not_found"`},
			{"DELETE", "/v1/jobs/" + settled, http.StatusConflict, `"settled"`},
			{"GET", "/v1/jobs/never-submitted/events", http.StatusNotFound, `"not_found"`},
		} {
			if code, b := f.do(tc.method, tc.path, apiKey, nil); code != tc.code || !bytes.Contains(b, []byte(tc.reason)) {
				t.Errorf("%s %s = %d %s, want %d %s", tc.method, tc.path, code, b, tc.code, tc.reason)
			}
		}
	})

	t.Run("events then resume with Last-Event-ID", func(t *testing.T) {
		code, ans := f.post("", `{"language":"python3","code":"import time\nfor i in range(3):\n    print('line', i, flush=True)\n    time.sleep(0.4)"}`)
		if code != http.StatusAccepted {
			t.Fatalf("POST = %d %v", code, ans)
		}
		id := ans["job_id"].(string)
		resp := f.send(t.Context(), "GET", "/v1/jobs/"+id+"/events", apiKey, nil)
		if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
			t.Fatalf("GET events = %d %s, want 200 text/event-stream", resp.StatusCode, ct)
		}
		evs := readEvents(t, resp.Body, "settled")
		resp.Body.Close()
		pages, out := pagesOf(t, evs)
		if out != "line 0\nline 1\nline 2\n" || len(pages) < 2 {
			t.Fatalf("pages = %d, output %q; want the 3 lines in 2 pages or more (events %+v)", len(pages), out, evs)
		}
		if last := evs[len(evs)-1]; last.Name != "settled" || !strings.Contains(last.Data, `"status":"succeeded"`) {
			t.Fatalf("last event = %+v, want settled succeeded", last)
		}
		// Resume after the first page: the others, then the settlement.
		resp = f.send(t.Context(), "GET", "/v1/jobs/"+id+"/events", apiKey, nil, "Last-Event-ID", pages[0].ID)
		rest := readEvents(t, resp.Body, "settled")
		resp.Body.Close()
		restPages, restOut := pagesOf(t, rest)
		if restOut != out[len(decodePage(t, pages[0])):] || len(restPages) != len(pages)-1 || rest[len(rest)-1].Name != "settled" {
			t.Errorf("resumed after %s: %d pages %q then %q, want %d pages %q then settled",
				pages[0].ID, len(restPages), restOut, rest[len(rest)-1].Name, len(pages)-1, out[len(decodePage(t, pages[0])):])
		}
	})

	t.Run("events through curl -N", func(t *testing.T) {
		curl, err := exec.LookPath("curl")
		if err != nil {
			testenv.Missing(t, "curl on PATH")
		}
		code, ans := f.post("", `{"language":"nodejs","code":"console.log('from node'); console.error('to stderr')"}`)
		if code != http.StatusAccepted {
			t.Fatalf("POST = %d %v", code, ans)
		}
		out, err := exec.CommandContext(t.Context(), curl, "-N", "-s", "--max-time", "60", "-H", "X-Api-Key: "+apiKey,
			f.srv.URL+"/v1/jobs/"+ans["job_id"].(string)+"/events").Output()
		if err != nil {
			t.Fatalf("curl -N: %v", err)
		}
		evs := readEvents(t, bytes.NewReader(out), "settled")
		pages, _ := pagesOf(t, evs)
		var streams []string
		for _, p := range pages {
			var pe struct{ Stream, Data string }
			json.Unmarshal([]byte(p.Data), &pe)
			streams = append(streams, pe.Stream)
		}
		if len(evs) == 0 || evs[len(evs)-1].Name != "settled" || !strings.Contains(strings.Join(streams, ","), "stdout") || !strings.Contains(strings.Join(streams, ","), "stderr") {
			t.Errorf("curl -N read %q, want stdout and stderr pages then settled", out)
		}
	})

	t.Run("cancel a running job", func(t *testing.T) {
		code, ans := f.post("", `{"language":"python3","code":"import time\nprint('started', flush=True)\ntime.sleep(120)"}`)
		if code != http.StatusAccepted {
			t.Fatalf("POST = %d %v", code, ans)
		}
		id := ans["job_id"].(string)
		resp := f.send(t.Context(), "GET", "/v1/jobs/"+id+"/events", apiKey, nil)
		defer resp.Body.Close()
		if first := readEvents(t, resp.Body, "page"); len(first) == 0 {
			t.Fatal("no page before the stream ended")
		}
		if code, b := f.do("DELETE", "/v1/jobs/"+id, apiKey, nil); code != http.StatusAccepted {
			t.Fatalf("DELETE = %d %s, want 202", code, b)
		}
		rest := readEvents(t, resp.Body, "settled")
		if len(rest) == 0 || rest[len(rest)-1].Name != "settled" || !strings.Contains(rest[len(rest)-1].Data, `"status":"cancelled"`) {
			t.Errorf("after DELETE: events %+v, want settled cancelled", rest)
		}
	})

	t.Run("a client gone while waiting does not cancel the job", func(t *testing.T) {
		for _, tc := range []struct {
			query string
			want  job.Status
		}{
			{"?wait=true", job.StatusSucceeded},
			{"?wait=true&cancel_on_disconnect=true", job.StatusCancelled},
		} {
			id := "gw-gone-" + strconv.Itoa(len(tc.query))
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan struct{})
			// The previous request's watch may still be ending: counted from zero, this one's is seen.
			testenv.WaitFor(t, 30*time.Second, "no request waiting", func() bool { return f.gw.Metrics().Waiting() == 0 })
			go func() {
				defer close(done)
				req, _ := http.NewRequestWithContext(ctx, "POST", f.srv.URL+"/v1/jobs"+tc.query,
					strings.NewReader(`{"id":"`+id+`","language":"python3","code":"import time\ntime.sleep(1.5)\nprint('done')"}`))
				req.Header.Set("X-Api-Key", apiKey)
				if resp, err := f.srv.Client().Do(req); err == nil {
					resp.Body.Close()
				}
			}()
			testenv.WaitFor(t, 30*time.Second, "request waiting", func() bool { return f.gw.Metrics().Waiting() > 0 })
			cancel()
			<-done
			if st := f.settle(id); st.Status != tc.want {
				t.Errorf("%s, client gone: status %s, want %s", tc.query, st.Status, tc.want)
			}
		}
	})

	t.Run("artifacts", func(t *testing.T) {
		code, ans := f.post("?wait=true", `{"language":"python3","code":"print(1)"}`)
		if code != http.StatusOK {
			t.Fatalf("POST = %d %v", code, ans)
		}
		code, b := f.do("GET", "/v1/jobs/"+ans["job_id"].(string)+"/artifacts/out/plot.png", apiKey, nil)
		if code != http.StatusNotFound || !bytes.Contains(b, []byte(`"no_artifact"`)) {
			t.Errorf("GET artifact of a job without = %d %s, want 404 no_artifact", code, b)
		}
		// A job that keeps a file: the worker stores it and the settlement lists it.
		code, ans = f.post("?wait=true", `{"language":"python3","outputs":["out/*.bin"],"code":"import os\nos.makedirs('out')\nopen('out/data.bin','wb').write(b'artifact bytes\\x00\\xff')"}`)
		if code != http.StatusOK || ans["status"] != "succeeded" {
			t.Fatalf("POST = %d %v", code, ans)
		}
		id, content := ans["job_id"].(string), []byte("artifact bytes\x00\xff")
		resp := f.send(t.Context(), "GET", "/v1/jobs/"+id+"/artifacts/out/data.bin", apiKey, nil)
		b, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !bytes.Equal(b, content) {
			t.Errorf("GET artifact = %d %q, want 200 %q", resp.StatusCode, b, content)
		}
		if got := resp.Header.Get("Content-Disposition"); got != "attachment; filename=data.bin" {
			t.Errorf("GET artifact: Content-Disposition %q, want attachment; filename=data.bin", got)
		}
		if code, b = f.do("GET", "/v1/jobs/"+id+"/artifacts/out/other.bin", apiKey, nil); code != http.StatusNotFound {
			t.Errorf("GET unlisted artifact = %d %s, want 404", code, b)
		}
		if code, b = f.do("GET", "/v1/jobs/"+id, apiKey, nil); code != http.StatusOK || !bytes.Contains(b, []byte(`"artifacts":[`)) {
			t.Errorf("GET settlement = %d %s, want it as stored, artifacts included", code, b)
		}
	})

	t.Run("bad-input corpus: 400 or a rejected settlement", func(t *testing.T) {
		for _, bad := range jobtest.BadInputs(job.DefaultPolicy().MaxBodyBytes) {
			if bad.Reason == job.ReasonIDMismatch {
				continue // the body's id is the message id here: no header can differ from it
			}
			code, b := f.do("POST", "/v1/jobs?wait=true", apiKey, []byte(bad.Body))
			var ans map[string]any
			if err := json.Unmarshal(b, &ans); err != nil {
				t.Errorf("%s: %d %q: not JSON", bad.Name, code, b)
				continue
			}
			switch {
			case code == http.StatusBadRequest && ans["reason"] == string(bad.Reason):
			case code == http.StatusOK && ans["status"] == "rejected" && ans["reason"] == string(bad.Reason):
			default:
				t.Errorf("%s: %d %v, want 400 or a rejected settlement with reason %s", bad.Name, code, clipMap(ans), bad.Reason)
			}
		}
		for _, u := range jobtest.UnreadableIDs {
			if u.ID == "" {
				continue // no id: the gateway gives one
			}
			code, b := f.do("POST", "/v1/jobs", apiKey, []byte(`{"id":`+strconv.Quote(u.ID)+`,"language":"python3","code":"print(1)"}`))
			if code != http.StatusBadRequest || !bytes.Contains(b, []byte(`"invalid_id"`)) {
				t.Errorf("%s: %d %s, want 400 invalid_id", u.Name, code, b)
			}
		}
		// The fleet still serves.
		if code, ans := f.post("?wait=true", `{"language":"python3","code":"print(1)"}`); code != http.StatusOK || ans["status"] != "succeeded" {
			t.Errorf("after the corpus: %d %v, want 200 succeeded", code, ans)
		}
	})

	t.Run("200 concurrent waiting requests", func(t *testing.T) {
		const n = 200
		before := runtime.NumGoroutine()
		var wg sync.WaitGroup
		errs := make(chan string, n)
		for i := range n {
			wg.Go(func() {
				req, _ := http.NewRequestWithContext(t.Context(), "POST", f.srv.URL+"/v1/jobs?wait=true",
					strings.NewReader(fmt.Sprintf(`{"language":"python3","code":"print(%d)"}`, i)))
				req.Header.Set("Authorization", "Bearer "+apiKey)
				resp, err := f.srv.Client().Do(req)
				if err != nil {
					errs <- err.Error()
					return
				}
				defer resp.Body.Close()
				var st job.Settlement
				if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != http.StatusOK ||
					st.Status != job.StatusSucceeded || st.StdoutBytes != int64(len(strconv.Itoa(i))+1) {
					errs <- fmt.Sprintf("job %d: %d %+v %v", i, resp.StatusCode, st, err)
				}
			})
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Error(e)
		}
		if w := f.gw.Metrics().Waiting(); w != 0 {
			t.Errorf("Waiting() = %d after every answer, want 0", w)
		}
		// Every connection and watch is gone: no consumer is left on the results stream, and the
		// goroutines come back to what they were, the embedded server's included.
		if c := f.consumers(); c != 0 {
			t.Errorf("results stream holds %d consumers after every answer, want 0", c)
		}
		f.srv.Client().CloseIdleConnections()
		testenv.WaitFor(t, 30*time.Second, fmt.Sprintf("goroutines back to %d after %d waiting requests", before, n), func() bool {
			return runtime.NumGoroutine() <= before+5
		})
	})

	t.Run("SIGTERM: in-flight requests end, then exit 0", func(t *testing.T) {
		p := f.startBinary("--grace", "60s")
		client := &http.Client{}
		defer client.CloseIdleConnections()
		type answer struct {
			code int
			st   job.Settlement
			err  error
		}
		answered := make(chan answer, 1)
		go func() {
			req, _ := http.NewRequest("POST", p.URL+"/v1/jobs?wait=true", strings.NewReader(`{"language":"python3","code":"import time\ntime.sleep(1)\nprint('late')"}`))
			req.Header.Set("X-Api-Key", apiKey)
			resp, err := client.Do(req)
			if err != nil {
				answered <- answer{err: err}
				return
			}
			defer resp.Body.Close()
			var a answer
			a.code, a.err = resp.StatusCode, json.NewDecoder(resp.Body).Decode(&a.st)
			answered <- a
		}()
		testenv.WaitFor(t, 30*time.Second, "request waiting in the gateway process", func() bool {
			req, _ := http.NewRequest("GET", p.URL+"/metrics", nil)
			req.Header.Set("X-Api-Key", apiKey)
			resp, err := client.Do(req)
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return bytes.Contains(b, []byte("runfleet_gateway_waiting 1"))
		})
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		a := <-answered
		if a.err != nil || a.code != http.StatusOK || a.st.Status != job.StatusSucceeded {
			t.Errorf("in-flight request across SIGTERM = %d %+v %v, want 200 succeeded", a.code, a.st, a.err)
		}
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			t.Fatal("gateway still running 30s after SIGTERM and its last request")
		}
		if code := p.cmd.ProcessState.ExitCode(); code != 0 || !strings.Contains(p.log.String(), `"gateway stopped"`) {
			t.Errorf("gateway exit code %d, want 0 and \"gateway stopped\":\n%s", code, p.log.String())
		}
	})

	t.Run("metrics", func(t *testing.T) {
		code, b := f.do("GET", "/metrics", apiKey, nil)
		if code != http.StatusOK || !bytes.Contains(b, []byte(`runfleet_gateway_requests_total{code="202",route="POST /v1/jobs"}`)) ||
			!bytes.Contains(b, []byte("runfleet_gateway_waiting 0")) {
			t.Errorf("GET /metrics = %d, want 200 with the request counters and the waiting gauge:\n%s", code, b)
		}
	})
}

func pagesOf(t *testing.T, evs []event) ([]event, string) {
	t.Helper()
	var pages []event
	var out strings.Builder
	var prev uint64
	for _, e := range evs {
		if e.Name != "page" {
			continue
		}
		seq, err := strconv.ParseUint(e.ID, 10, 64)
		if err != nil || seq <= prev {
			t.Fatalf("page id %q after %d: want a growing stream sequence", e.ID, prev)
		}
		prev = seq
		pages = append(pages, e)
		out.WriteString(decodePage(t, e))
	}
	return pages, out.String()
}

func decodePage(t *testing.T, e event) string {
	t.Helper()
	var p struct {
		Stream string
		Index  int64
		Offset int64
		Data   string
	}
	if err := json.Unmarshal([]byte(e.Data), &p); err != nil {
		t.Fatalf("page %q: %v", e.Data, err)
	}
	b, err := base64.StdEncoding.DecodeString(p.Data)
	if err != nil {
		t.Fatalf("page data %q: not base64: %v", p.Data, err)
	}
	return string(b)
}

func clipMap(m map[string]any) string {
	s := fmt.Sprint(m)
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}

// TestAuth: every route but the probes needs the key, as X-Api-Key or Bearer.
func TestAuth(t *testing.T) {
	f := newFleet(t, gateway.Options{})
	for _, tc := range []struct {
		name, method, path string
		hdr                []string
		want               int
	}{
		{"no key", "GET", "/v1/jobs/x", nil, http.StatusUnauthorized},
		{"wrong key", "GET", "/v1/jobs/x", []string{"X-Api-Key", "nope"}, http.StatusUnauthorized},
		{"key with a suffix", "GET", "/v1/jobs/x", []string{"X-Api-Key", apiKey + "x"}, http.StatusUnauthorized},
		{"wrong bearer", "GET", "/v1/jobs/x", []string{"Authorization", "Bearer nope"}, http.StatusUnauthorized},
		{"basic auth", "GET", "/v1/jobs/x", []string{"Authorization", "Basic " + apiKey}, http.StatusUnauthorized},
		{"key", "GET", "/v1/jobs/x", []string{"X-Api-Key", apiKey}, http.StatusNotFound},
		{"bearer", "GET", "/v1/jobs/x", []string{"Authorization", "Bearer " + apiKey}, http.StatusNotFound},
		{"dify run without key", "POST", "/v1/sandbox/run", nil, http.StatusUnauthorized},
		{"dependencies without key", "GET", "/v1/sandbox/dependencies?language=python3", nil, http.StatusUnauthorized},
		{"metrics without key", "GET", "/metrics", nil, http.StatusUnauthorized},
		{"unknown route without key", "GET", "/v2/anything", nil, http.StatusUnauthorized},
		{"unknown route with key", "GET", "/v2/anything", []string{"X-Api-Key", apiKey}, http.StatusNotFound},
		{"healthz is public", "GET", "/healthz", nil, http.StatusOK},
		{"readyz is public", "GET", "/readyz", nil, http.StatusOK},
		{"dify health is public", "GET", "/health", nil, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code, b := f.do(tc.method, tc.path, "", nil, tc.hdr...); code != tc.want {
				t.Errorf("%s %s = %d %s, want %d", tc.method, tc.path, code, b, tc.want)
			}
		})
	}
	if _, err := gateway.New(t.Context(), f.nats.Conn(), gateway.Options{}); err != gateway.ErrNoKey {
		t.Errorf("New without a key: %v, want ErrNoKey", err)
	}
}

// TestBadRequests: what the gateway refuses itself, without a worker.
func TestBadRequests(t *testing.T) {
	f := newFleet(t, gateway.Options{})
	for _, tc := range []struct {
		name, method, path, body string
		hdr                      []string
		reason                   string
	}{
		{"invalid id in path", "GET", "/v1/jobs/a.b", "", nil, "invalid_id"},
		{"invalid id for events", "GET", "/v1/jobs/" + strings.Repeat("a", 200) + "/events", "", nil, "invalid_id"},
		{"invalid id to cancel", "DELETE", "/v1/jobs/-x", "", nil, "invalid_id"},
		{"bad Last-Event-ID", "GET", "/v1/jobs/x/events", "", []string{"Last-Event-ID", "abc"}, "invalid_last_event_id"},
		{"bad wait", "POST", "/v1/jobs?wait=maybe", `{"language":"python3","code":"x"}`, nil, "invalid_query"},
		{"bad queue", "POST", "/v1/jobs?queue=A.B", `{"language":"python3","code":"x"}`, nil, "invalid_queue"},
		{"id not a string", "POST", "/v1/jobs", `{"id":7,"language":"python3","code":"x"}`, nil, "invalid_id"},
		{"body over 1,000,000 bytes", "POST", "/v1/jobs", `{"language":"python3","code":"` + strings.Repeat("x", 1000000) + `"}`, nil, "payload_too_large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, b := f.do(tc.method, tc.path, apiKey, []byte(tc.body), tc.hdr...)
			var e struct{ Reason, Detail string }
			if code != http.StatusBadRequest || json.Unmarshal(b, &e) != nil || e.Reason != tc.reason || e.Detail == "" {
				t.Errorf("%s %s = %d %s, want 400 {reason: %s, detail}", tc.method, clipString(tc.path), code, b, tc.reason)
			}
		})
	}
}

func clipString(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// TestUnavailable: with the fleet's NATS gone, requests are 503 and /readyz says so; they are
// served again once it is back.
func TestUnavailable(t *testing.T) {
	f := newFleet(t, gateway.Options{})
	f.nats.Stop()
	testenv.WaitFor(t, 30*time.Second, "readyz 503", func() bool {
		code, _ := f.do("GET", "/readyz", "", nil)
		return code == http.StatusServiceUnavailable
	})
	for _, tc := range []struct{ method, path, body string }{
		{"POST", "/v1/jobs", `{"language":"python3","code":"print(1)"}`},
		{"POST", "/v1/jobs?wait=true", `{"language":"python3","code":"print(1)"}`},
		{"GET", "/v1/jobs/x", ""},
		{"GET", "/v1/jobs/x/events", ""},
		{"DELETE", "/v1/jobs/x", ""},
		{"POST", "/v1/sandbox/run", `{"language":"python3","code":"print(1)","preload":"","enable_network":true}`},
	} {
		if code, b := f.do(tc.method, tc.path, apiKey, []byte(tc.body)); code != http.StatusServiceUnavailable {
			t.Errorf("%s %s with NATS down = %d %s, want 503", tc.method, tc.path, code, b)
		}
	}
	f.nats.Restart()
	testenv.WaitFor(t, 30*time.Second, "readyz 200 after NATS restarted", func() bool {
		code, _ := f.do("GET", "/readyz", "", nil)
		return code == http.StatusOK
	})
	if code, b := f.do("POST", "/v1/jobs", apiKey, []byte(`{"language":"python3","code":"print(1)"}`)); code != http.StatusAccepted {
		t.Errorf("POST after NATS is back = %d %s, want 202", code, b)
	}
}

// TestMaxWait: a wait past --max-wait answers with the job's id (native) or 504 (dify), and the
// job stays queued.
func TestMaxWait(t *testing.T) {
	f := newFleet(t, gateway.Options{MaxWait: 300 * time.Millisecond, Queue: "nobody-serves"})
	code, ans := f.post("?wait=true", `{"id":"gw-long","language":"python3","code":"print(1)"}`)
	if code != http.StatusAccepted || ans["job_id"] != "gw-long" {
		t.Errorf("POST ?wait=true past max-wait = %d %v, want 202 with the job id", code, ans)
	}
	code, b := f.do("POST", "/v1/sandbox/run", apiKey, []byte(`{"language":"python3","code":"print(1)","preload":"","enable_network":true}`))
	if code != http.StatusGatewayTimeout || !bytes.Contains(b, []byte(`"code":-504`)) {
		t.Errorf("POST /v1/sandbox/run past max-wait = %d %s, want 504 code -504", code, b)
	}
	resp := f.send(t.Context(), "GET", "/v1/jobs/gw-long/events", apiKey, nil)
	evs := readEvents(t, resp.Body, "settled")
	resp.Body.Close()
	if len(evs) != 0 {
		t.Errorf("events past max-wait = %+v, want the stream to end without events", evs)
	}
	if w := f.gw.Metrics().Waiting(); w != 0 {
		t.Errorf("Waiting() = %d, want 0", w)
	}
}

// TestWaitsHoldNoConsumer: a waiting request follows its job without a JetStream consumer
// (protocol version 2), so the 1,000 consumers nats-server allows per stream by default never
// bound how many requests the fleet's gateways hold: with the results stream limited to one
// consumer, more requests than that wait at once and the stream's consumer count stays 0.
func TestWaitsHoldNoConsumer(t *testing.T) {
	f := newFleet(t, gateway.Options{MaxWait: time.Minute})
	const waiting = 16
	js, err := jetstream.New(f.nats.Conn())
	if err != nil {
		t.Fatal(err)
	}
	name := f.client.Subjects().ResultsStream()
	s, err := js.Stream(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.MaxConsumers = 1
	if err := js.DeleteStream(t.Context(), name); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	conns := holdWaiting(t, f.srv.Listener.Addr().String(), waiting)
	testenv.WaitFor(t, 2*time.Minute, "every request waiting", func() bool {
		return f.gw.Metrics().Waiting() == waiting
	})
	if n := f.consumers(); n != 0 {
		t.Errorf("results stream consumers while %d requests wait = %d, want 0", waiting, n)
	}
	for _, c := range conns {
		c.Close()
	}
	testenv.WaitFor(t, 2*time.Minute, "no waiting request left", func() bool {
		return f.gw.Metrics().Waiting() == 0
	})
}
