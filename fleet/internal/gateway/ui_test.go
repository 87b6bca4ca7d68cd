package gateway_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/gateway"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
)

// browser is an HTTP client with a cookie jar that follows no redirect, as a form post sees it.
func (f *fleet) browser() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func postForm(t *testing.T, c *http.Client, u string, v url.Values) *http.Response {
	t.Helper()
	resp, err := c.PostForm(u, v)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// login posts key to the login form at base (/ui/ of a gateway) as the form itself does: with
// the token of the form the browser was given.
func login(t *testing.T, c *http.Client, base, key string) *http.Response {
	t.Helper()
	_, form := get(t, c, base+"login")
	m := csrfField.FindStringSubmatch(form)
	if m == nil {
		t.Fatalf("login form has no token:\n%s", form)
	}
	return postForm(t, c, base+"login", url.Values{"key": {key}, "csrf": {m[1]}})
}

func TestWebView(t *testing.T) {
	f := newFleet(t, gateway.Options{})
	f.startWorker()
	c := f.browser()
	base := f.srv.URL + "/ui/"
	if code, _ := get(t, c, base); code != http.StatusSeeOther {
		t.Errorf("GET /ui/ without a session = %d, want 303 to the login form", code)
	}
	if resp := login(t, c, base, "wrong"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("login with a wrong key = %d, want 401", resp.StatusCode)
	}
	resp := login(t, c, base, apiKey)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login = %d, want 303", resp.StatusCode)
	}
	cookie := resp.Header.Get("Set-Cookie")
	for _, attr := range []string{"HttpOnly", "SameSite=Strict", "Path=/ui/"} {
		if !strings.Contains(cookie, attr) {
			t.Errorf("session cookie %q lacks %s", cookie, attr)
		}
	}
	// The overview names the worker once its heartbeat is heard.
	testenv.WaitFor(t, 30*time.Second, "the worker on the overview", func() bool {
		code, body := get(t, c, base)
		return code == http.StatusOK && strings.Contains(body, f.prefix+"-w")
	})
	// A job's page shows its output, then cancel and redrive need the form's token.
	_, out := f.post("", `{"language":"python3","code":"import time\nprint('hello from the job', flush=True)\ntime.sleep(60)"}`)
	id := out["job_id"].(string)
	var page string
	testenv.WaitFor(t, 30*time.Second, "the job's output on its page", func() bool {
		_, page = get(t, c, base+"jobs/"+id)
		return strings.Contains(page, "hello from the job")
	})
	if !strings.Contains(page, "hello from the job&#39;, flush=True") {
		t.Errorf("job page does not show the stored request:\n%s", page)
	}
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("job page has no form token:\n%s", page)
	}
	if resp := postForm(t, c, base+"jobs/"+id+"/cancel", url.Values{"csrf": {"forged"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("cancel with a forged token = %d, want 403", resp.StatusCode)
	}
	if resp := postForm(t, c, base+"jobs/"+id+"/cancel", url.Values{"csrf": {m[1]}}); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("cancel = %d, want 303", resp.StatusCode)
	}
	if st := f.settle(id); st.Status != "cancelled" {
		t.Errorf("after the cancel button the job settled %s, want cancelled", st.Status)
	}
	testenv.WaitFor(t, 30*time.Second, "the cancelled job in the list", func() bool {
		_, body := get(t, c, base+"jobs?status=cancelled")
		return strings.Contains(body, id)
	})
	// The overview's row of the queue and tenant: served, and the job counted among the settled.
	testenv.WaitFor(t, 30*time.Second, "the cancelled job counted in its queue's row", func() bool {
		_, body := get(t, c, base)
		return strings.Contains(body, `<tr class="queue-row"><td>default</td><td>default</td><td>yes</td>`) &&
			strings.Contains(body, `status=cancelled&amp;queue=default&amp;tenant=default&amp;since=1h">cancelled 1</a>`)
	})
	// Another session's token is refused: the token is bound to the cookie.
	other := f.browser()
	login(t, other, base, apiKey)
	if resp := postForm(t, other, base+"jobs/"+id+"/redrive", url.Values{"csrf": {m[1]}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("redrive with another session's token = %d, want 403", resp.StatusCode)
	}
	if code, _ := get(t, http.DefaultClient, base+"static/app.js"); code != http.StatusOK {
		t.Errorf("GET app.js = %d", code)
	}
	// A cross-site request is refused even with the right token (Sec-Fetch-Site, set by browsers).
	req, _ := http.NewRequest("POST", base+"jobs/"+id+"/redrive", strings.NewReader(url.Values{"csrf": {m[1]}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	if resp, err := c.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-site redrive = %v %v, want 403", resp, err)
	} else {
		resp.Body.Close()
	}
	// The overview's live stream outside a browser: an event with the rendered rows.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, _ = http.NewRequestWithContext(ctx, "GET", base+"live/overview", nil)
	resp, err := c.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET live/overview = %v %v, want 200 text/event-stream", resp, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var event strings.Builder
	for in := false; sc.Scan(); {
		line := sc.Text()
		if line == "event: overview" {
			in = true
		} else if in && line == "" {
			break
		} else if in {
			event.WriteString(line + "\n")
		}
	}
	if !strings.Contains(event.String(), "queue-row") {
		t.Errorf("live/overview's first event = %q, want the rendered queue rows", event.String())
	}
}

// TestUIOff: --ui=false serves no web view, and the API is unchanged.
func TestUIOff(t *testing.T) {
	f := newFleet(t, gateway.Options{DisableUI: true})
	for _, path := range []string{"/ui/", "/ui/login", "/ui/static/app.js"} {
		if code, _ := f.do("GET", path, apiKey, nil); code != http.StatusNotFound {
			t.Errorf("GET %s with the view off = %d, want 404", path, code)
		}
	}
	if code, b := f.do("GET", "/v1/jobs/no-such-job", apiKey, nil); code != http.StatusNotFound {
		t.Errorf("GET a job with the view off = %d %s, want the API's 404", code, b)
	}
}

// TestViewersShareOneWatch: the web view follows a shown job with one watch, whatever the number
// of pages showing it, so open pages add nothing to the load on NATS: the gateway's subscriptions
// with five live pages of a job are those with one, and the watch ends a while after its last viewer.
func TestViewersShareOneWatch(t *testing.T) {
	f := newFleet(t, gateway.Options{})
	f.startWorker()
	c := f.browser()
	if resp := login(t, c, f.srv.URL+"/ui/", apiKey); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login = %d", resp.StatusCode)
	}
	_, out := f.post("", `{"language":"python3","code":"import time\nprint('up', flush=True)\ntime.sleep(60)"}`)
	id := out["job_id"].(string)
	// view opens the job's live page and returns once its output has arrived through it.
	view := func() (leave func()) {
		ctx, cancel := context.WithCancel(t.Context())
		req, _ := http.NewRequestWithContext(ctx, "GET", f.srv.URL+"/ui/jobs/"+id+"/live", nil)
		resp, err := c.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET live = %v %v", resp, err)
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() && !strings.Contains(sc.Text(), "up") {
		}
		if sc.Err() != nil {
			t.Fatalf("reading the live page: %v", sc.Err())
		}
		return func() { cancel(); resp.Body.Close() }
	}
	before := f.gwConn.NumSubscriptions()
	leaves := []func(){view()}
	one := f.gwConn.NumSubscriptions()
	for range 4 {
		leaves = append(leaves, view())
	}
	if five := f.gwConn.NumSubscriptions(); one <= before || five != one {
		t.Errorf("the gateway's subscriptions: %d before, %d with one viewer, %d with five; want five viewers to cost what one does", before, one, five)
	}
	for _, leave := range leaves {
		leave()
	}
	if code, b := f.do("DELETE", "/v1/jobs/"+id, apiKey, nil); code != http.StatusAccepted {
		t.Errorf("DELETE = %d %s", code, b)
	}
	// The feed lingers 10 s for a viewer that comes back (a reload), then ends.
	testenv.WaitFor(t, 30*time.Second, "the watch ended after its last viewer", func() bool {
		return f.gwConn.NumSubscriptions() == before
	})
}
