package gateway_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/gateway"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/protocol"
)

// TestForgedHeartbeats: anyone allowed to publish on the workers subject adds rows to the web
// view's overview, so what it adds is bounded: a heartbeat dated in 2099 is not listed (it would
// never expire), and a flood of ids fills at most 1000 rows.
func TestForgedHeartbeats(t *testing.T) {
	f := newFleet(t, gateway.Options{})
	nc := f.nats.Conn()
	publish := func(id string, at time.Time, version ...string) {
		b, _ := json.Marshal(protocol.Heartbeat{ID: id, Version: append(version, "forged")[0], Slots: 1, At: at})
		if err := nc.Publish(f.client.Subjects().Workers(), b); err != nil {
			t.Fatal(err)
		}
	}
	publish("from-the-future", time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC))
	publish("skewed-clock", time.Now().Add(-time.Hour)) // a clock behind: listed, by its arrival
	publish("marker", time.Now())
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	c := f.browser()
	login(t, c, f.srv.URL+"/ui/", apiKey)
	var page string
	testenv.WaitFor(t, 30*time.Second, "the marker on the overview", func() bool {
		_, page = get(t, c, f.srv.URL+"/ui/")
		return strings.Contains(page, "<td>marker</td>")
	})
	if strings.Contains(page, "from-the-future") {
		t.Error("a heartbeat dated 2099 is listed on the overview")
	}
	if !strings.Contains(page, "<td>skewed-clock</td>") {
		t.Error("a heartbeat from a clock an hour behind is not listed, though it just arrived")
	}
	for i := range 1500 {
		publish(fmt.Sprintf("flood-%d", i), time.Now())
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// A worker already listed sends again after the flood: once the overview shows it, it shows
	// everything delivered before it (one publisher, one subject: in order).
	publish("marker", time.Now(), "after-flood")
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the overview after the flood", func() bool {
		_, page = get(t, c, f.srv.URL+"/ui/")
		return strings.Contains(page, "<td>after-flood</td>")
	})
	if n := strings.Count(page, "<td>forged</td>") + 1; n != 1000 {
		t.Errorf("the overview lists %d workers after a flood of 1500 ids, want 1000", n)
	}
}
