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
	"github.com/runfleet/runfleet/internal/testenv"
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
			// What docs/protocol.md says a publisher that also follows its jobs needs.
			{Username: "follower", Password: "follower-pw", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Allow: []string{"runfleet.jobs.*.acme.>",
					"$JS.API.DIRECT.GET.RUNFLEET_RESULTS", "$JS.API.DIRECT.GET.RUNFLEET_JOBS",
					"$JS.API.DIRECT.GET.RUNFLEET_RESULTS.>", "$JS.API.DIRECT.GET.RUNFLEET_JOBS.>"}},
				Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>", "runfleet.watch.>"}},
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
	if st := f.settlement(sub.ID, time.Minute); st.Status != job.StatusSucceeded {
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
	fc, err := nats.Connect(withUser(t, plain, "follower", "follower-pw"))
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
