package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/queue"
	"github.com/runfleet/runfleet/fleet/internal/tenant"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// fleetFor makes, on the server at url, the streams of the default prefix and, for each pair,
// the tenant consumer a worker would make: nothing consumes them, so their jobs stay queued.
func fleetFor(t *testing.T, nc *nats.Conn, pairs ...queue.Pair) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := job.NewSubjects("")
	if err != nil {
		t.Fatal(err)
	}
	if err := protocol.EnsureStreams(t.Context(), js, s, protocol.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pairs {
		if _, err := queue.TenantConsumer(t.Context(), js, s, p, 0, time.Time{}, queue.ConsumerOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return js
}

// waitQueued waits until the tenant consumer of q and tenant counts want jobs not yet delivered.
func waitQueued(t *testing.T, js jetstream.JetStream, stream, q, tenant string, want uint64) {
	t.Helper()
	s, err := job.NewSubjects("")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		c, err := js.Consumer(ctx, stream, s.TenantConsumer(q, tenant))
		if err == nil && c.CachedInfo().NumPending == want {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("consumer of %s/%s: %v; want %d queued", q, tenant, err, want)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestTenantCommands: set changes only the bounds given, key add prints a key once and stores its
// digest, show lists policies and tenants without one with their queued and running jobs, and
// bad input is one line before anything is connected.
func TestTenantCommands(t *testing.T) {
	n := testenv.StartNATS(t)
	js := fleetFor(t, n.Conn(), queue.Pair{Queue: "default", Tenant: "beta"}, queue.Pair{Queue: "batch", Tenant: "beta"})
	for _, q := range []string{"default", "batch", "batch"} {
		if got := submitAt(n.URL, "--no-wait", "--tenant", "beta", "--queue", q, "--lang", "python3", "--code", "print(1)"); got.code != 0 {
			t.Fatalf("submit as beta = %d %q", got.code, got.stderr)
		}
	}
	waitQueued(t, js, "RUNFLEET_JOBS", "default", "beta", 1)
	waitQueued(t, js, "RUNFLEET_JOBS", "batch", "beta", 2)

	for _, args := range [][]string{
		{"tenant", "set", "acme", "--max-queued", "10", "--weight", "2"},
		{"tenant", "set", "acme", "--max-running", "3"}, // keeps max_queued and weight
	} {
		if got := submitAt(n.URL, args...); got.code != 0 || !strings.HasPrefix(got.stdout, "tenant acme: ") {
			t.Fatalf("submit %q = %d %q %q", args, got.code, got.stdout, got.stderr)
		}
	}
	added := submitAt(n.URL, "tenant", "key", "add", "acme")
	key := strings.TrimSpace(added.stdout)
	if added.code != 0 || !strings.HasPrefix(key, "rf_") || strings.Count(added.stdout, "\n") != 1 {
		t.Fatalf("tenant key add = %d %q %q, want the key alone on stdout", added.code, added.stdout, added.stderr)
	}
	kv, err := jetstream.New(n.Conn())
	if err != nil {
		t.Fatal(err)
	}
	bucket, err := kv.KeyValue(t.Context(), "RUNFLEET_TENANTS")
	if err != nil {
		t.Fatal(err)
	}
	p, ok, err := tenant.Get(t.Context(), bucket, "acme")
	want := tenant.Policy{MaxQueued: 10, MaxRunning: 3, Weight: 2, APIKeysSHA256: []string{tenant.HashKey(key)}}
	if err != nil || !ok || p.MaxQueued != want.MaxQueued || p.MaxRunning != want.MaxRunning || p.Weight != want.Weight ||
		len(p.APIKeysSHA256) != 1 || p.APIKeysSHA256[0] != want.APIKeysSHA256[0] {
		t.Errorf("stored policy of acme = %+v, %v, %v; want %+v", p, ok, err, want)
	}

	nd := submitAt(n.URL, "tenant", "show", "--json")
	var rows []tenantRow
	for line := range strings.Lines(nd.stdout) {
		var r tenantRow
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		rows = append(rows, r)
	}
	if nd.code != 0 || len(rows) != 2 || rows[0].Tenant != "acme" || rows[1].Tenant != "beta" ||
		rows[0].Policy == nil || *rows[0].Policy != (policyRow{MaxQueued: 10, MaxRunning: 3, Weight: 2, APIKeys: 1}) ||
		rows[1].Policy != nil || rows[1].Queued != 3 || rows[1].Running != 0 {
		t.Errorf("tenant show --json = %d %q %q, want acme's policy, then beta without one and 3 queued", nd.code, nd.stdout, nd.stderr)
	}
	table := submitAt(n.URL, "tenant", "show")
	if lines := strings.Split(strings.TrimSpace(table.stdout), "\n"); table.code != 0 || len(lines) != 3 ||
		!strings.HasPrefix(lines[0], "TENANT") || strings.Join(strings.Fields(lines[1]), " ") != "acme 10 3 2 1 0 0" ||
		strings.Join(strings.Fields(lines[2]), " ") != "beta - - - - 3 0" {
		t.Errorf("tenant show = %d %q %q, want a header, acme and beta", table.code, table.stdout, table.stderr)
	}
	for _, out := range []string{nd.stdout, table.stdout} {
		if strings.Contains(out, tenant.HashKey(key)) || strings.Contains(out, key) {
			t.Errorf("tenant show printed a key or its digest: %q", out)
		}
	}
	one := submitAt(n.URL, "tenant", "show", "gamma", "--json")
	if one.code != 0 || strings.TrimSpace(one.stdout) != `{"tenant":"gamma","policy":null,"queued":0,"running":0}` {
		t.Errorf("tenant show gamma = %d %q %q, want its one empty row", one.code, one.stdout, one.stderr)
	}

	dead := "nats://127.0.0.1:1" // checked before anything is connected
	for _, bad := range [][]string{
		{"tenant"}, {"tenant", "bogus"}, {"tenant", "set"}, {"tenant", "set", "Bad Name"},
		{"tenant", "set", "acme", "--max-queued", "-1"}, {"tenant", "set", "acme", "--max-running", "-2"},
		{"tenant", "set", "acme", "--weight", "5000"}, {"tenant", "set", "acme", "--weight", "x"},
		{"tenant", "key", "add"}, {"tenant", "key", "add", "a", "b"}, {"tenant", "show", "a", "b"}, {"tenant", "show", "a.b"},
	} {
		if got := submitAt(dead, bad...); got.code != exitUsage || strings.Count(got.stderr, "\n") != 1 || strings.Contains(got.stderr, "unreachable") {
			t.Errorf("submit %q = %d %q, want 2 (usage) and one line about the input", bad, got.code, got.stderr)
		}
	}
}

// TestTenantBoundUser: a NATS user configured with the lines docs/protocol.md gives ("A NATS user
// bound to its tenant"), read from there, submits as acme, is refused with exit 75 past acme's
// max_queued (unless --no-queue-check), and is refused by the server when it publishes a job as another tenant: nothing
// is stored.
func TestTenantBoundUser(t *testing.T) {
	conf := docConfig(t)
	n := testenv.StartNATSWith(t, func(o *server.Options) {
		var parsed server.Options
		if err := parsed.ProcessConfigString(conf); err != nil {
			t.Fatalf("the configuration of docs/protocol.md: %v", err)
		}
		o.Users = parsed.Users
	})
	fleetURL, acmeURL := withUser(t, n.URL, "fleet", "fleet-pw"), withUser(t, n.URL, "acme", "acme-pw")
	fc, err := nats.Connect(fleetURL)
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	js := fleetFor(t, fc, queue.Pair{Queue: "default", Tenant: "acme"})
	if got := submitAt(fleetURL, "tenant", "set", "acme", "--max-queued", "2"); got.code != 0 {
		t.Fatalf("tenant set as the fleet = %d %q", got.code, got.stderr)
	}

	job1 := []string{"--no-wait", "--tenant", "acme", "--lang", "python3", "--code", "print(1)"}
	for i := range 2 {
		if got := submitAt(acmeURL, job1...); got.code != 0 || !job.ValidID(strings.TrimSpace(got.stdout)) {
			t.Fatalf("submit %d as acme = %d %q %q, want its id", i+1, got.code, got.stdout, got.stderr)
		}
	}
	// The server counts a stored job in its consumers' backlogs a moment after it acks the publish
	// (nats-server signals consumers on a queue of its own); the check reads that count.
	waitQueued(t, js, "RUNFLEET_JOBS", "default", "acme", 2)
	full := submitAt(acmeURL, job1...)
	if full.code != exitQueueFull || full.stdout != "" || strings.Count(full.stderr, "\n") != 1 || !strings.Contains(full.stderr, "max_queued is 2") {
		t.Errorf("submit as acme past max_queued = %d %q %q, want 75 and one line", full.code, full.stdout, full.stderr)
	}
	if got := submitAt(acmeURL, append(job1, "--no-queue-check")...); got.code != 0 {
		t.Errorf("submit --no-queue-check as acme past max_queued = %d %q, want it stored", got.code, got.stderr)
	}

	violations := make(chan error, 10)
	nc, err := nats.Connect(acmeURL, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case violations <- err:
		default:
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// The server's refusal is what is tested: the queue check would read other's entry, which
	// acme may not, and report that first.
	c, err := runfleet.NewClient(t.Context(), nc, runfleet.Options{Tenant: "acme", SkipQueueCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	other, err := c.Submit(ctx, "", job.Request{Language: "python3", Code: "print(1)"}, &runfleet.SubmitOptions{Tenant: "other"})
	if err == nil {
		t.Errorf("Submit() as tenant other = %+v, want the server to refuse it", other)
	}
	select {
	case v := <-violations:
		if !errors.Is(v, nats.ErrPermissionViolation) || !strings.Contains(v.Error(), "runfleet.jobs.default.other.") {
			t.Errorf("the server reported %v, want a permissions violation for the job's subject", v)
		}
	case <-time.After(10 * time.Second):
		t.Error("the server reported no permissions violation for tenant other")
	}
	stream, err := js.Stream(t.Context(), "RUNFLEET_JOBS")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := stream.Info(t.Context()); err != nil || info.State.Msgs != 3 {
		t.Errorf("jobs stored = %+v, %v; want acme's 3 only", info.State, err)
	}

	// Each tenant's settlement of one id, as a worker stores them: acme reads its own through the
	// lines of the documentation, and nothing of bravo's, by the client or by naming its subject.
	s, _ := job.NewSubjects("")
	for _, tenant := range []string{"acme", "bravo"} {
		body := fmt.Appendf(nil, `{"job_id":"shared-1","status":"succeeded","worker":%q}`, tenant)
		if _, err := js.Publish(t.Context(), s.Settled(tenant, "shared-1"), body); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.Publish(t.Context(), s.Settled("bravo", "bravo-only"), []byte(`{"job_id":"bravo-only","status":"succeeded"}`)); err != nil {
		t.Fatal(err)
	}
	if st, err := c.Settlement(t.Context(), "shared-1"); err != nil || st.Worker != "acme" {
		t.Errorf("acme's Settlement(shared-1) = %+v, %v; want acme's own", st, err)
	}
	if _, err := c.Settlement(t.Context(), "bravo-only"); !errors.Is(err, runfleet.ErrNotFound) {
		t.Errorf("acme's Settlement(bravo-only) error = %v, want ErrNotFound", err)
	}
	if m, err := nc.Request("$JS.API.DIRECT.GET.RUNFLEET_RESULTS.runfleet.results.bravo.bravo-only.settled", nil, time.Second); err == nil {
		t.Errorf("acme's direct get of bravo's settlement = %q, want refused", m.Data)
	}
	select {
	case v := <-violations:
		if !errors.Is(v, nats.ErrPermissionViolation) || !strings.Contains(v.Error(), "runfleet.results.bravo.") {
			t.Errorf("the server reported %v, want a permissions violation for bravo's results", v)
		}
	case <-time.After(10 * time.Second):
		t.Error("the server reported no permissions violation for bravo's results")
	}
}

// docConfig returns the nats-server configuration docs/protocol.md gives for a user bound to
// tenant acme.
func docConfig(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("../../../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)### A NATS user bound to its tenant\n.*?```conf\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/protocol.md has no ```conf block under \"A NATS user bound to its tenant\"")
	}
	return string(m[1])
}

// withUser returns raw, a nats:// URL, with user and password.
func withUser(t *testing.T, raw, user, password string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(user, password)
	return u.String()
}

// TestTenantRevocation: an operator lists a tenant's key digests, revokes one by a prefix of its
// digest, deletes a tenant (refused while it has jobs queued, unless --force) and rotates the web
// view's session secret, all in the bucket the gateways follow.
func TestTenantRevocation(t *testing.T) {
	n := testenv.StartNATS(t)
	js := fleetFor(t, n.Conn(), queue.Pair{Queue: "default", Tenant: "acme"})
	var keys []string
	for range 2 {
		got := submitAt(n.URL, "tenant", "key", "add", "acme")
		if got.code != 0 {
			t.Fatalf("tenant key add = %d %q", got.code, got.stderr)
		}
		keys = append(keys, strings.TrimSpace(got.stdout))
	}
	list := submitAt(n.URL, "tenant", "key", "list", "acme")
	want := tenant.HashKey(keys[0]) + "\n" + tenant.HashKey(keys[1]) + "\n"
	if list.code != 0 || list.stdout != want {
		t.Errorf("tenant key list = %d %q %q, want the two digests", list.code, list.stdout, list.stderr)
	}
	bucket, err := js.KeyValue(t.Context(), "RUNFLEET_TENANTS")
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]string{
		{"tenant", "key", "remove", "acme", tenant.HashKey(keys[0])[:7]}, // too short
		{"tenant", "key", "remove", "acme", "zzzzzzzz"},
		{"tenant", "key", "remove", "acme"},
		{"tenant", "delete"},
		{"tenant", "rotate-session-secret", "extra"},
	} {
		if got := submitAt("nats://127.0.0.1:1", bad...); got.code != exitUsage || strings.Count(got.stderr, "\n") != 1 || strings.Contains(got.stderr, "unreachable") {
			t.Errorf("submit %q = %d %q, want %d (usage) and one line about the input", bad, got.code, got.stderr, exitUsage)
		}
	}
	for _, refused := range [][]string{
		{"tenant", "key", "remove", "acme", "00000000" + strings.Repeat("0", 56)}, // no such key
		{"tenant", "key", "remove", "nobody", tenant.HashKey(keys[0])[:8]},        // no such tenant
		{"tenant", "key", "list", "nobody"},
		{"tenant", "delete", "nobody"},
	} {
		if got := submitAt(n.URL, refused...); got.code != exitOther {
			t.Errorf("submit %q = %d %q, want 125", refused, got.code, got.stderr)
		}
	}
	if _, ok, _ := tenant.Get(t.Context(), bucket, "nobody"); ok {
		t.Error("a refused key remove made an entry for tenant nobody")
	}
	rm := submitAt(n.URL, "tenant", "key", "remove", "acme", strings.ToUpper(tenant.HashKey(keys[0])[:10]))
	if rm.code != 0 || !strings.Contains(rm.stdout, tenant.HashKey(keys[0])) || strings.Contains(rm.stdout, keys[0]) {
		t.Errorf("tenant key remove = %d %q %q, want the removed digest named", rm.code, rm.stdout, rm.stderr)
	}
	if p, ok, err := tenant.Get(t.Context(), bucket, "acme"); err != nil || !ok || len(p.APIKeysSHA256) != 1 || p.APIKeysSHA256[0] != tenant.HashKey(keys[1]) {
		t.Errorf("acme's policy after the remove = %+v %v %v, want only the second key", p, ok, err)
	}

	if got := submitAt(n.URL, "--no-wait", "--tenant", "acme", "--lang", "python3", "--code", "print(1)"); got.code != 0 {
		t.Fatalf("submit as acme = %d %q", got.code, got.stderr)
	}
	waitQueued(t, js, "RUNFLEET_JOBS", "default", "acme", 1)
	if got := submitAt(n.URL, "tenant", "delete", "acme"); got.code != exitOther || !strings.Contains(got.stderr, "1 jobs queued") {
		t.Errorf("tenant delete with a job queued = %d %q, want 125 naming the queued job", got.code, got.stderr)
	}
	if _, ok, _ := tenant.Get(t.Context(), bucket, "acme"); !ok {
		t.Error("a refused delete removed acme")
	}
	if got := submitAt(n.URL, "tenant", "delete", "acme", "--force"); got.code != 0 {
		t.Errorf("tenant delete --force = %d %q", got.code, got.stderr)
	}
	if _, ok, err := tenant.Get(t.Context(), bucket, "acme"); ok || err != nil {
		t.Errorf("acme after delete: entry %v, %v; want none", ok, err)
	}

	secret := func() []byte {
		e, err := bucket.Get(t.Context(), protocol.SessionSecretKey)
		if err != nil {
			return nil
		}
		return e.Value()
	}
	before := secret()
	if got := submitAt(n.URL, "tenant", "rotate-session-secret"); got.code != 0 {
		t.Fatalf("tenant rotate-session-secret = %d %q", got.code, got.stderr)
	}
	if after := secret(); len(after) != 32 || string(after) == string(before) {
		t.Errorf("session secret after rotation: %d bytes, changed %v; want 32 new bytes", len(after), string(after) != string(before))
	}
	if show := submitAt(n.URL, "tenant", "show"); show.code != 0 || strings.Contains(show.stdout, "_session") || strings.Contains(show.stderr, "_session") {
		t.Errorf("tenant show = %d %q %q, want the reserved keys not listed", show.code, show.stdout, show.stderr)
	}
}
