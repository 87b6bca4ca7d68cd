package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/runfleet/runfleet/fleet/internal/gateway"
	"github.com/runfleet/runfleet/fleet/internal/tenant"
)

// TestOperatorFindsTheTenant: the operator's page of a job named without ?tenant= goes to the one
// tenant that holds the id, and names the tenants when several do (the API's 409 ambiguous_id);
// a tenant's session still reaches its own job of that id and no other.
func TestOperatorFindsTheTenant(t *testing.T) {
	f := newFleet(t, gateway.Options{})
	alpha := f.addKey("alpha", tenant.Policy{})
	bravo := f.addKey("bravo", tenant.Policy{})
	for _, s := range []struct{ key, id string }{{alpha, "alpha-only"}, {alpha, "shared-id"}, {bravo, "shared-id"}} {
		body := `{"id":"` + s.id + `","language":"python3","code":"print(1)"}`
		if code, b := f.do("POST", "/v1/jobs?queue=nobody-serves", s.key, []byte(body)); code != http.StatusAccepted {
			t.Fatalf("POST %s = %d %s, want 202", s.id, code, b)
		}
	}
	base := f.srv.URL + "/ui/"
	op := f.browser()
	if resp := login(t, op, base, apiKey); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("operator login = %d", resp.StatusCode)
	}
	resp, err := op.Get(base + "jobs/alpha-only")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != "/ui/jobs/alpha-only?tenant=alpha" {
		t.Errorf("operator's GET /ui/jobs/alpha-only = %d to %q, want 303 to alpha's page", resp.StatusCode, loc)
	}
	if code, page := get(t, op, base+"jobs/shared-id"); code != http.StatusConflict || !strings.Contains(page, "alpha, bravo") {
		t.Errorf("operator's GET /ui/jobs/shared-id = %d, want 409 naming alpha and bravo:\n%s", code, page)
	}
	if code, _ := get(t, op, base+"jobs/shared-id?tenant=bravo"); code != http.StatusOK {
		t.Errorf("operator's GET /ui/jobs/shared-id?tenant=bravo = %d, want 200", code)
	}
	cb := f.browser()
	if resp := login(t, cb, base, bravo); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("bravo login = %d", resp.StatusCode)
	}
	if code, page := get(t, cb, base+"jobs/shared-id"); code != http.StatusOK || strings.Contains(page, "alpha") {
		t.Errorf("bravo's GET /ui/jobs/shared-id = %d, want 200 with its own job and nothing of alpha's:\n%s", code, page)
	}
	if code, _ := get(t, cb, base+"jobs/alpha-only"); code == http.StatusSeeOther {
		t.Errorf("bravo's GET /ui/jobs/alpha-only = %d: a tenant's session must not be sent to another tenant's job", code)
	}
}
