package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// TestLeastPrivilegeSubmitter: a NATS user allowed only to publish its tenant's jobs and to
// receive the acks on its inbox (docs/protocol.md, "Permissions") makes a client and submits a
// job, which the fleet runs: the client touches no stream. A job under another tenant is refused
// by the server and stored nowhere.
func TestLeastPrivilegeSubmitter(t *testing.T) {
	testenv.NeedRoot(t)
	n := testenv.StartNATSWith(t, func(o *server.Options) {
		o.Users = []*server.User{
			{Username: "fleet", Password: "fleet-pw"},
			{Username: "acme", Password: "acme-pw", Permissions: &server.Permissions{
				Publish:   &server.SubjectPermission{Allow: []string{"runfleet.jobs.*.acme.>"}},
				Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
			}},
			// What docs/protocol.md says a publisher that also follows, looks up and cancels its
			// jobs needs: every subject names its tenant.
			{Username: "follower", Password: "follower-pw", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Allow: []string{"runfleet.jobs.*.acme.>",
					"$JS.API.DIRECT.GET.RUNFLEET_RESULTS.runfleet.results.acme.>",
					"$JS.API.DIRECT.GET.RUNFLEET_JOBS.runfleet.jobs.*.acme.>",
					"runfleet.cancel.acme.*"}},
				Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>", "runfleet.watch.acme.>"}},
			}},
		}
	})
	plain := n.URL
	n.URL = withUser(t, plain, "fleet", "fleet-pw") // the fleet's own connections
	f := newFleetOn(t, n)
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	f.start("w", "--listen", addr)
	testenv.WaitFor(t, time.Minute, "the worker ready", func() bool { code, _ := get(t, "http://"+addr+"/readyz"); return code == 200 })

	violations := make(chan error, 10)
	nc, err := nats.Connect(withUser(t, plain, "acme", "acme-pw"), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case violations <- err:
		default:
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// These users may not read the tenants bucket: docs/protocol.md has them skip the max_queued check.
	c, err := runfleet.NewClient(t.Context(), nc, runfleet.Options{Tenant: "acme", SkipQueueCheck: true})
	if err != nil {
		t.Fatalf("NewClient() as the least-privilege user: %v", err)
	}
	sub, err := c.Submit(t.Context(), "", job.Request{Language: "python3", Code: "print('least')"}, nil)
	if err != nil {
		t.Fatalf("Submit() as the least-privilege user: %v", err)
	}
	if st := f.settlementOf("acme", sub.ID, time.Minute); st.Status != job.StatusSucceeded {
		t.Errorf("job %s settled %s/%s", sub.ID, st.Status, st.Reason)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	other, err := c.Submit(ctx, "", job.Request{Language: "python3", Code: "print('other')"}, &runfleet.SubmitOptions{Tenant: "other"})
	if err == nil {
		t.Errorf("Submit() under tenant other = %+v, want the server to refuse it", other)
	}
	select {
	case v := <-violations:
		if !errors.Is(v, nats.ErrPermissionViolation) {
			t.Errorf("the server reported %v, want a permissions violation", v)
		}
	case <-time.After(10 * time.Second):
		t.Error("the server reported no permissions violation for tenant other")
	}
	jobs, err := f.js.Stream(t.Context(), f.client.Subjects().JobsStream())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.GetLastMsgForSubject(t.Context(), f.client.Subjects().JobByID(other.ID)); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("the refused job %s: lookup error = %v, want it stored nowhere", other.ID, err)
	}

	// A user with the follow permissions of docs/protocol.md runs a job and reads its output.
	followerViolations := make(chan error, 10)
	fc, err := nats.Connect(withUser(t, plain, "follower", "follower-pw"), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case followerViolations <- err:
		default:
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	follower, err := runfleet.NewClient(t.Context(), fc, runfleet.Options{Tenant: "acme", SkipQueueCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	rctx, rcancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer rcancel()
	st, err := follower.Run(rctx, "", job.Request{Language: "python3", Code: "print('followed')"}, &runfleet.RunOptions{
		OnPage: func(p runfleet.Page) error { out.Write(p.Data); return nil }})
	if err != nil || st.Status != job.StatusSucceeded || out.String() != "followed\n" {
		t.Errorf("Run() as the follower = %s, %v, output %q; want succeeded with its output", st.Status, err, out.String())
	}
	if info, err := follower.Lookup(t.Context(), st.JobID); err != nil || info.State != runfleet.JobSettled {
		t.Errorf("Lookup() as the follower = %+v, %v; want it settled", info, err)
	}

	// bravo runs a job with the id acme's job had, and one with an id of its own: acme's user
	// reaches neither, through the client or by naming bravo's subjects.
	bravo, err := runfleet.NewClient(t.Context(), f.js.Conn(), runfleet.Options{Tenant: "bravo", SkipQueueCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	// acme, with exactly these permissions, publishes a job of its own whose Nats-Msg-Id is the id
	// bravo is about to use (issue 37, attack 3): bravo's job is stored and runs all the same,
	// and acme's is refused (its header names another id).
	poison := nats.NewMsg("runfleet.jobs.default.acme.junk-1")
	poison.Header.Set(job.HeaderMsgID, "bravo-pay-99")
	poison.Data = []byte(`{"language":"python3","code":"print('junk')"}`)
	fjs, err := jetstream.New(fc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fjs.PublishMsg(rctx, poison); err != nil {
		t.Fatalf("acme's publish with another id's Nats-Msg-Id: %v", err)
	}
	for _, id := range []string{st.JobID, "bravo-secret-1", "bravo-pay-99"} {
		bst, err := bravo.Run(rctx, "", job.Request{ID: id, Language: "python3", Code: "print('bravo secret')"}, nil)
		if err != nil || bst.Status != job.StatusSucceeded || bst.StdoutBytes != int64(len("bravo secret\n")) {
			t.Fatalf("bravo's Run(%s) = %+v, %v; want its own job run", id, bst, err)
		}
	}
	testenv.WaitFor(t, 30*time.Second, "acme's poisoned job refused", func() bool {
		_, err := follower.Lookup(t.Context(), "junk-1")
		return errors.Is(err, runfleet.ErrNotFound)
	})
	if own, err := follower.Settlement(t.Context(), st.JobID); err != nil || own.StdoutBytes != int64(len("followed\n")) {
		t.Errorf("acme's Settlement(%s) = %+v, %v; want acme's own job, not bravo's of the same id", st.JobID, own, err)
	}
	if _, err := follower.Lookup(t.Context(), "bravo-secret-1"); !errors.Is(err, runfleet.ErrNotFound) {
		t.Errorf("acme's Lookup(bravo's job) error = %v, want ErrNotFound", err)
	}
	if err := follower.Cancel(t.Context(), "bravo-secret-1"); !errors.Is(err, runfleet.ErrNotFound) {
		t.Errorf("acme's Cancel(bravo's job) error = %v, want ErrNotFound", err)
	}
	// Naming bravo's subjects outright: the server refuses each, and answers nothing.
	body := []byte(`{"last_by_subj":"runfleet.results.bravo.bravo-secret-1.settled"}`)
	for _, req := range []struct {
		subject string
		body    []byte
	}{
		{"$JS.API.DIRECT.GET.RUNFLEET_RESULTS.runfleet.results.bravo.bravo-secret-1.settled", nil},
		{"$JS.API.DIRECT.GET.RUNFLEET_JOBS.runfleet.jobs.default.bravo.bravo-secret-1", nil},
		{"$JS.API.DIRECT.GET.RUNFLEET_RESULTS", body},
	} {
		if m, err := fc.Request(req.subject, req.body, 2*time.Second); err == nil {
			t.Errorf("acme's direct get %s = %q %v, want refused", req.subject, m.Data, m.Header)
		}
		select {
		case v := <-followerViolations:
			if !errors.Is(v, nats.ErrPermissionViolation) {
				t.Errorf("direct get %s: the server reported %v, want a permissions violation", req.subject, v)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("direct get %s: no permissions violation", req.subject)
		}
	}
	if _, err := fc.SubscribeSync("runfleet.watch.bravo.>"); err == nil {
		select {
		case v := <-followerViolations:
			if !errors.Is(v, nats.ErrPermissionViolation) {
				t.Errorf("subscribe to bravo's watch: the server reported %v, want a permissions violation", v)
			}
		case <-time.After(10 * time.Second):
			t.Error("subscribe to bravo's watch: no permissions violation")
		}
	}
}

// settlementOf waits for tenant's job id's settlement.
func (f *fleet) settlementOf(tenant, id string, within time.Duration) job.Settlement {
	f.t.Helper()
	in, err := runfleet.NewInspector(f.js.Conn(), runfleet.InspectorOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	c, err := in.Tenant(tenant)
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(f.t.Context(), within)
	defer cancel()
	st, err := c.Watch(ctx, id, nil)
	if err != nil {
		f.t.Fatalf("no settlement of %s's %s within %v: %v", tenant, id, within, err)
	}
	return st
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
