package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/runfleet/runfleet/fleet/internal/gateway"
	"github.com/runfleet/runfleet/fleet/internal/tenant"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
)

// TestBrowser drives the web view in Debian's chromium, headless: it logs in, watches a job's
// output arrive live, cancels a job with the page's button, redrives a job its dead worker left
// unknown, and saves screenshots into $RUNFLEET_SCREENSHOTS (default: the test's temporary
// directory).
func TestBrowser(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		testenv.Missing(t, "chromium on PATH (Debian package chromium)")
	}
	f := newFleet(t, gateway.Options{})
	srv := f.srv
	victim := f.startWorker("--lease-ttl", "2s")
	shots := os.Getenv("RUNFLEET_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	browser := startChromium(t, chromium)
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		ctx, cancel := context.WithTimeout(browser, time.Minute)
		defer cancel()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			png, err := chromedp.FullScreenshot(100)(ctx, tg)
			if err != nil {
				return chromedp.Void{}, err
			}
			return chromedp.Void{}, os.WriteFile(filepath.Join(shots, name), png, 0o644)
		}
	}

	run("log in",
		chromedp.Navigate(srv.URL+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS(`input[name=key]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=key]`), apiKey),
		chromedp.Submit(chromedp.CSS(`input[name=key]`)),
		chromedp.WaitVisible(chromedp.CSS(`#overview`)),
	)
	// The overview goes live: the worker's row arrives by server-sent events at the latest, and a
	// marker put into the rendered page is replaced by the next push (the page never reloads).
	run("the worker on the overview", waitText(`#overview`, f.prefix+"-w"))
	run("the overview pushed",
		js(`document.getElementById('overview').insertAdjacentHTML('beforeend', '<span id="pushed-marker"></span>')`),
		chromedp.Poll[chromedp.Void](`!document.getElementById('pushed-marker')`))

	// A job that prints, waits, then prints again: its second line arrives while the page is open.
	// An observer set once the first line shows records, in sessionStorage (which outlives the
	// reload at the job's end), that the second line was appended to that same page: output that
	// came only with the reload's rendering would leave no record.
	_, out := f.post("", `{"language":"python3","code":"import time\nprint('first line', flush=True)\ntime.sleep(4)\nprint('second line', flush=True)"}`)
	id := out["job_id"].(string)
	run("the job's output, live",
		chromedp.Navigate(srv.URL+"/ui/jobs/"+id),
		waitText(`#output`, "first line"),
		js(`(() => {
			const out = document.getElementById('output');
			if (out.textContent.includes('second line')) return;
			new MutationObserver(() => {
				if (out.textContent.includes('second line')) sessionStorage.setItem('second-line-live', '1');
			}).observe(out, {childList: true, subtree: true, characterData: true});
		})()`),
		waitText(`#output`, "second line"),
		waitText(`.summary`, "succeeded"),
		jsTrue(`sessionStorage.getItem('second-line-live') === '1'`, "the second line was appended live, not only rendered by the reload"),
		shot("job.png"),
	)
	// The overview shows the job once the index has it and the next push came: the screenshot
	// waits for its figure, its bar in the chart included.
	run("the overview screenshot", chromedp.Navigate(srv.URL+"/ui/"),
		chromedp.Poll[chromedp.Void](`document.querySelector('#overview td.status-succeeded').textContent === '1' &&
			document.querySelector('#jobs-all rect[data-status="succeeded"]') !== null`, chromedp.WithPollingTimeout(time.Minute)),
		shot("overview.png"))

	// Cancel with the page's button (a form with the session's CSRF token).
	_, out = f.post("", `{"language":"python3","code":"import time\nprint('waiting', flush=True)\ntime.sleep(120)"}`)
	long := out["job_id"].(string)
	run("cancel by the button",
		chromedp.Navigate(srv.URL+"/ui/jobs/"+long),
		waitText(`#output`, "waiting"),
		chromedp.Click(chromedp.CSS(`#cancel`)),
		waitText(`.summary`, "cancelled"),
	)
	if st := f.settle(long); st.Status != "cancelled" {
		t.Errorf("job %s settled %s after the cancel button, want cancelled", long, st.Status)
	}
	run("the jobs list", chromedp.Navigate(srv.URL+"/ui/jobs?status=cancelled"), waitText(`table.jobs`, long), shot("jobs.png"))

	// A job whose worker dies while it runs settles unknown once another worker takes it over.
	_, out = f.post("", `{"language":"python3","code":"import time\nprint('started', flush=True)\ntime.sleep(3)\nprint('done')"}`)
	lost := out["job_id"].(string)
	run("the job runs", chromedp.Navigate(srv.URL+"/ui/jobs/"+lost), waitText(`#output`, "started"))
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	f.startWorker("--lease-ttl", "2s", "--id", f.prefix+"-w2")
	if st := f.settle(lost); st.Status != "unknown" {
		t.Fatalf("job %s settled %s after its worker died, want unknown", lost, st.Status)
	}
	// Redrive needs "it may have run" ticked; the new job names the old one and runs.
	// The open page reloads itself when the job ends.
	run("redrive refused without confirmation",
		waitText(`.summary`, "unknown"),
		chromedp.Click(chromedp.CSS(`#redrive`)),
		waitText(`.error`, "may have run"),
	)
	run("redrive confirmed",
		chromedp.Navigate(srv.URL+"/ui/jobs/"+lost),
		chromedp.Click(chromedp.CSS(`#may_have_run`)),
		chromedp.Click(chromedp.CSS(`#redrive`)),
		waitText(`.summary`, "succeeded"),
		waitText(`.summary`, "redrive of "+lost),
		waitText(`#output`, "done"),
		shot("redriven.png"),
	)
}

// startChromium starts a headless chromium for the test and returns the context of its tab.
func startChromium(t *testing.T, chromium string) context.Context {
	t.Helper()
	alloc, cancelAlloc := chromedp.NewExecAllocator(t.Context(), append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]),
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.WindowSize(1280, 860),
		chromedp.UserDataDir(t.TempDir()))...)
	t.Cleanup(cancelAlloc)
	browser, cancelBrowser := chromedp.NewContext(alloc)
	t.Cleanup(cancelBrowser)
	// The browser lives as long as the context of its first run; each step gets its own bound.
	if err := chromedp.Do(browser); err != nil {
		testenv.Missing(t, "a chromium that starts headless: %v", err)
	}
	return browser
}

// TestBrowserLoginCSRF: a foreign page that posts a login form to the gateway (the attacker's own
// tenant key, and a form token of the attacker's) from the victim's chromium does not log the
// victim's browser in: the victim's next visit finds the login form.
func TestBrowserLoginCSRF(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		testenv.Missing(t, "chromium on PATH (Debian package chromium)")
	}
	f := newFleet(t, gateway.Options{})
	keyA := f.addKey("attacker", tenant.Policy{})
	_, form := get(t, f.browser(), f.srv.URL+"/ui/login")
	token := csrfField.FindStringSubmatch(form)[1]
	// The foreign page is on another site: localhost, where the gateway is 127.0.0.1.
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `<!doctype html><form id="f" method="post" action="%s/ui/login">
<input name="key" value="%s"><input name="csrf" value="%s"></form>
<script>document.getElementById('f').submit()</script>`, f.srv.URL, keyA, token)
	}))
	defer evil.Close()
	evilURL := strings.Replace(evil.URL, "127.0.0.1", "localhost", 1)
	browser := startChromium(t, chromium)
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		ctx, cancel := context.WithTimeout(browser, time.Minute)
		defer cancel()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	run("the victim has seen the login form", chromedp.Navigate(f.srv.URL+"/ui/login"), chromedp.WaitVisible(chromedp.CSS(`input[name=key]`)))
	run("the foreign page posts its login",
		chromedp.Navigate(evilURL),
		waitText(`.error`, "foreign login form"),
	)
	run("the victim is not logged in",
		chromedp.Navigate(f.srv.URL+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS(`input[name=key]`)),
		jsTrue(`document.getElementById('overview') === null`, "no overview: not logged in"),
	)
	// The victim's own login in the same browser still works.
	run("the victim logs in",
		chromedp.SendKeys(chromedp.CSS(`input[name=key]`), apiKey),
		chromedp.Submit(chromedp.CSS(`input[name=key]`)),
		chromedp.WaitVisible(chromedp.CSS(`#overview`)),
	)
}

// waitText waits until the element sel's text contains want, reloading nothing: what the page
// shows comes from the server's first answer or its events.
// js runs a script in the page for its effect.
func js(script string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := chromedp.Evaluate[bool](`(() => { `+script+`; return true; })()`)(ctx, tg)
		return chromedp.Void{}, err
	}
}

// jsTrue fails unless expr is true in the page now.
func jsTrue(expr, what string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		ok, err := chromedp.Evaluate[bool](expr)(ctx, tg)
		if err == nil && !ok {
			err = errors.New("not so: " + what)
		}
		return chromedp.Void{}, err
	}
}

func waitText(sel, want string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		for {
			text, err := chromedp.TextContent(chromedp.CSS(sel))(ctx, tg)
			if err == nil && strings.Contains(text, want) {
				return chromedp.Void{}, nil
			}
			select {
			case <-ctx.Done():
				return chromedp.Void{}, fmt.Errorf("%s never showed %q (last: %q, %v): %w", sel, want, text, err, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}
