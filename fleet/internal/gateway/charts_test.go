package gateway_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/gateway"
	"github.com/runfleet/runfleet/fleet/internal/tenant"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
)

var chartSeg = regexp.MustCompile(`data-status="(\w+)" data-count="(\d+)"`)

// chartFigures sums the segments of the overview's chart of the whole view by status.
func chartFigures(body string) map[string]int {
	out := map[string]int{}
	_, chart, ok := strings.Cut(body, `id="jobs-all"`)
	if !ok {
		return out
	}
	chart, _, _ = strings.Cut(chart, "</svg>")
	for _, m := range chartSeg.FindAllStringSubmatch(chart, -1) {
		n, _ := strconv.Atoi(m[2])
		out[m[1]] += n
	}
	return out
}

// TestWebViewChartsPerTenant: the overview's charts are the fleet's for the operator and a tenant's own
// for its session, which names no other tenant.
func TestWebViewChartsPerTenant(t *testing.T) {
	f := newFleet(t, gateway.Options{})
	f.startWorker()
	keyA := f.addKey("alpha", tenant.Policy{})
	keyB := f.addKey("beta", tenant.Policy{})
	ids := []string{
		f.submitAs(keyA, "", `{"language":"python3","code":"print(1)"}`),
		f.submitAs(keyA, "", `{"language":"python3","code":"print(2)"}`),
		f.submitAs(keyB, "", `{"language":"python3","code":"import sys; sys.exit(3)"}`),
	}
	for _, id := range ids {
		f.settle(id)
	}
	base := f.srv.URL + "/ui/"
	operator, alpha := f.browser(), f.browser()
	login(t, operator, base, apiKey)
	login(t, alpha, base, keyA)
	var body string
	testenv.WaitFor(t, 30*time.Second, "the operator's chart holds every job", func() bool {
		_, body = get(t, operator, base)
		got := chartFigures(body)
		return got["succeeded"] == 2 && got["failed"] == 1
	})
	if !strings.Contains(body, "all queues and tenants") || !strings.Contains(body, `data-label="default · beta"`) {
		t.Errorf("the operator's overview lacks the fleet's chart or beta's backlog row")
	}
	testenv.WaitFor(t, 30*time.Second, "alpha's chart holds its jobs", func() bool {
		_, body = get(t, alpha, base)
		got := chartFigures(body)
		return got["succeeded"] == 2
	})
	if got := chartFigures(body); got["failed"] != 0 || len(got) != 1 {
		t.Errorf("alpha's chart = %v, want its 2 succeeded jobs only", got)
	}
	if !strings.Contains(body, "all queues of tenant alpha") || strings.Contains(body, "beta") {
		t.Errorf("alpha's overview is not its own or names beta:\n%s", body)
	}
}
