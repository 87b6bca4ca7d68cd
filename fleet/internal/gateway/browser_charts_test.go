package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/runfleet/runfleet/fleet/internal/gateway"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
)

// hostileCode is a job's code that would run script in the page if the view put it in unescaped.
const hostileCode = "s = '</script><img src=x onerror=\"window.pwned=1\"><b id=\"injected\">'\nprint(len(s))\n"

// TestBrowserCharts drives the overview's charts and a job's timeline and source in Debian's
// chromium, for a known set of jobs: 3 succeeded, 2 failed, then 4 that sleep on a worker of 2
// slots (the backlog). It saves charts.png and timeline.png into $RUNFLEET_SCREENSHOTS.
func TestBrowserCharts(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		testenv.Missing(t, "chromium on PATH (Debian package chromium)")
	}
	f := newFleet(t, gateway.Options{})
	f.startWorker()
	shots := os.Getenv("RUNFLEET_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}

	body := func(code, stdin string) string {
		b, _ := json.Marshal(map[string]string{"language": "python3", "code": code, "stdin": stdin})
		return string(b)
	}
	const hostileStdin = "<i>stdin</i> & more\n"
	var ids []string
	for _, b := range []string{body(hostileCode, hostileStdin), body("print('ok')", ""), body("print('ok')", ""),
		body("import sys\nsys.exit(3)", ""), body("import sys\nsys.exit(3)", "")} {
		_, out := f.post("", b)
		ids = append(ids, out["job_id"].(string))
	}
	want := map[string]string{}
	for i, id := range ids {
		want[id] = "succeeded"
		if i >= 3 {
			want[id] = "failed"
		}
		if st := f.settle(id); string(st.Status) != want[id] {
			t.Fatalf("job %s settled %s, want %s", id, st.Status, want[id])
		}
	}
	// The backlog: 4 jobs that sleep, on a worker of 2 slots. They are cancelled at the end.
	var sleepers []string
	for range 4 {
		_, out := f.post("", body("import time\ntime.sleep(120)", ""))
		sleepers = append(sleepers, out["job_id"].(string))
	}
	t.Cleanup(func() {
		for _, id := range sleepers {
			_ = f.client.Cancel(context.Background(), id)
		}
	})

	browser := startChromium(t, chromium)
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		ctx, cancel := context.WithTimeout(browser, 90*time.Second)
		defer cancel()
		if err := chromedp.Do(ctx, steps...); err != nil {
			dctx, dcancel := context.WithTimeout(browser, 10*time.Second)
			diag, _ := chromedp.Run(dctx, chromedp.Evaluate[string](chartsDiag))
			dcancel()
			t.Fatalf("%s: %v\npage: %s", what, err, diag)
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
		chromedp.Navigate(f.srv.URL+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS(`input[name=key]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=key]`), apiKey),
		chromedp.Submit(chromedp.CSS(`input[name=key]`)),
		chromedp.WaitVisible(chromedp.CSS(`#overview`)),
	)
	// The overview's figures are pushed every 2 s: wait until they hold every job, then check
	// the charts' shape. The whole view's chart and the one queue row's hold the same jobs.
	run("the charts",
		js(chartsJS),
		chromedp.Poll[chromedp.Void](`figures('jobs-all').succeeded === 3 && figures('jobs-all').failed === 2 &&
			backlog().length === 1 && backlog()[0].jobs === 4`, chromedp.WithPollingTimeout(time.Minute), chromedp.WithPollingInterval(200*time.Millisecond)),
		jsTrue(`document.querySelectorAll('#jobs-all g.minute').length === 60`, "60 minutes in the whole view's chart"),
		jsTrue(`document.querySelectorAll('#jobs-all rect.seg').length >= 2 && document.querySelectorAll('#jobs-all rect.seg').length <= 6`,
			"a segment per status and minute: 2 statuses over 1 to 3 minutes"),
		jsTrue(`figures('jobs-all').total === 5`, "5 jobs settled, no other status"),
		jsTrue(`document.querySelectorAll('.small-multiples svg.jobs-chart').length === document.querySelectorAll('tr.queue-row').length`,
			"a chart per queue row"),
		jsTrue(`figures('jobs-row-0').succeeded === 3 && figures('jobs-row-0').failed === 2`, "the row's chart holds the same jobs"),
		jsTrue(`backlog()[0].label === 'default · default'`, "the backlog row of the default queue and tenant"),
		jsTrue(`document.querySelector('#jobs-all desc').textContent.includes('5 jobs in the hour, 3 succeeded, 2 failed')`,
			"the chart's figures as text"),
		shot("charts.png"),
	)

	hostile := ids[0]
	run("the job's timeline and source",
		chromedp.Navigate(f.srv.URL+"/ui/jobs/"+hostile),
		waitText(`.summary`, "succeeded"),
		jsTrue(`[...document.querySelectorAll('.timeline li[data-stage]')].map(l => l.dataset.stage).join(' ') === 'queued claimed started finished settled'`,
			"five stages in order"),
		jsTrue(`['queued', 'started', 'finished', 'settled'].every(s => document.querySelector('li[data-stage="' + s + '"] time'))`,
			"a time for every stage the settlement records"),
		jsTrue(`document.querySelector('li[data-stage="claimed"]').classList.contains('missing') && !document.querySelector('li[data-stage="claimed"] time')`,
			"the claim, which the settlement does not record, shown missing"),
		jsTrue(`[...document.querySelectorAll('.timeline-bar rect[data-span]')].map(r => r.dataset.span).join(' ') === 'waiting running settling'`,
			"the bar's three spans"),
		jsTrue(fmt.Sprintf(`document.getElementById('code').textContent === %q`, hostileCode), "the code, as source"),
		jsTrue(`document.querySelector('#code').className === 'language-python3' && document.querySelector('.source .language').textContent === 'python3'`,
			"the language named"),
		jsTrue(fmt.Sprintf(`document.getElementById('stdin').textContent === %q`, hostileStdin), "the stdin, as text"),
		jsTrue(`document.querySelectorAll('main img, #injected, #stdin i').length === 0 && window.pwned === undefined`,
			"the code's markup inert"),
		shot("timeline.png"),
	)
	failed := ids[3]
	run("a failed job's timeline",
		chromedp.Navigate(f.srv.URL+"/ui/jobs/"+failed),
		waitText(`.summary`, "failed"),
		jsTrue(`document.querySelectorAll('.timeline li.missing').length === 1`, "only the claim missing"),
	)
}

// chartsJS defines what reads the overview's charts: figures(id) sums a jobs chart's segments by
// status, backlog() lists the backlog chart's rows.
const chartsJS = `
window.figures = (id) => {
	const out = {total: 0};
	for (const r of document.querySelectorAll('#' + id + ' rect.seg')) {
		out[r.dataset.status] = (out[r.dataset.status] || 0) + Number(r.dataset.count);
		out.total += Number(r.dataset.count);
	}
	return out;
};
window.backlog = () => [...document.querySelectorAll('g.backlog-row')].map(g =>
	({label: g.dataset.label, jobs: Number(g.dataset.waiting) + Number(g.dataset.running)}));
`

// chartsDiag is what a failed step prints of the page.
const chartsDiag = `(() => { const o = document.getElementById('overview') || document.querySelector('main'); return o ? o.innerText.slice(0, 3000) : document.title; })()`
