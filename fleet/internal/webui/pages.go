package webui

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/queue"
	"github.com/runfleet/runfleet/fleet/internal/sse"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// readTimeout bounds what a page reads from the fleet.
const readTimeout = 10 * time.Second

// overviewPeriod is how often the overview is read from the fleet and pushed to open pages.
const overviewPeriod = 2 * time.Second

func (u *UI) overview(w http.ResponseWriter, r *http.Request) {
	data := u.snapshot(r.Context(), sessionOf(r))
	u.render(w, r, http.StatusOK, "overview", data)
}

// overviewLive pushes the overview's body every period, rendered once per period for every page.
func (u *UI) overviewLive(w http.ResponseWriter, r *http.Request) {
	events, err := sse.Start(w)
	if err != nil {
		return
	}
	t := time.NewTicker(overviewPeriod)
	defer t.Stop()
	for {
		data := u.snapshot(r.Context(), sessionOf(r))
		var b strings.Builder
		if err := u.pages["overview"].ExecuteTemplate(&b, "body", data); err != nil {
			return
		}
		if events.Send(sse.Event{Name: "overview", Data: b.String()}) != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-t.C:
		}
	}
}

type queueRow struct {
	Queue, Tenant    string
	Served           bool // a worker heard from within a minute serves the queue
	Waiting, Running uint64
	OldestWait       string // how long the oldest waiting job has waited; "" when none does
	Err              string
	figures
}

// oldestRows bounds the rows whose oldest wait one overview reads (a get each), and the rows
// whose settled jobs it counts: with the whole view's, (1+100) × 9 filters, within one request's
// job.MaxCountQueries.
const oldestRows = 100

type statusCount struct {
	Status job.Status
	Count  int64
}

// figures are the settled jobs of the last hour by status, and the jobs/s of the last minute.
type figures struct {
	Settled  []statusCount
	JobsPerS string
}

// snapshot is the overview's data, read at most once a period per tenant.
func (u *UI) snapshot(ctx context.Context, s Session) map[string]any {
	u.snap.mu.Lock()
	defer u.snap.mu.Unlock()
	key := "*"
	if !s.Operator {
		key = s.Tenant
	}
	if d, ok := u.snap.data[key].(map[string]any); ok && time.Since(u.snap.at) < overviewPeriod {
		out := maps.Clone(d)
		out["Session"] = s
		return out
	}
	if time.Since(u.snap.at) >= overviewPeriod {
		u.snap.data = map[string]any{}
		u.snap.at = time.Now()
	}
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	data := map[string]any{"Now": time.Now()}
	workers := u.beats.list()
	if s.Operator {
		data["Workers"] = workers
	}
	rows, qerr := u.queues(ctx, s.Tenant, workers)
	data["Queues"] = rows
	total, err := u.settled(ctx, s.Tenant, rows)
	if err = errors.Join(qerr, err); err != nil {
		data["Error"] = err.Error()
	}
	data["Settled"], data["JobsPerS"] = total.Settled, total.JobsPerS
	charts, cerr := u.chartsOf(ctx, s.Tenant, rows)
	data["Charts"] = charts
	if cerr != nil && err == nil {
		data["Error"] = cerr.Error()
	}
	u.snap.data[key] = data
	out := maps.Clone(data)
	out["Session"] = s
	return out
}

// counts is how many settled jobs each query selects, a request to the job index per
// job.MaxCountQueries of them.
func (u *UI) counts(ctx context.Context, queries []job.ListQuery) ([]int64, error) {
	out := make([]int64, 0, len(queries))
	for chunk := range slices.Chunk(queries, job.MaxCountQueries) {
		c, err := u.o.Inspector.CountJobs(ctx, job.CountQuery{Queries: chunk})
		if err != nil {
			return nil, err
		}
		out = append(out, c...)
	}
	return out, nil
}

// settled fills the figures of the first oldestRows rows and returns the whole view's (the
// fleet's, or tenant's when not empty), all from one request to the job index.
func (u *UI) settled(ctx context.Context, tenant string, rows []queueRow) (figures, error) {
	now := time.Now()
	counted := rows[:min(len(rows), oldestRows)]
	views := []job.ListQuery{{Tenant: tenant}}
	for _, r := range counted {
		views = append(views, job.ListQuery{Queue: r.Queue, Tenant: r.Tenant})
	}
	per := len(job.Statuses) + 1
	queries := make([]job.ListQuery, 0, len(views)*per)
	for _, v := range views {
		for _, st := range job.Statuses {
			q := v
			q.Status, q.Since = st, now.Add(-time.Hour)
			queries = append(queries, q)
		}
		v.Since = now.Add(-time.Minute)
		queries = append(queries, v)
	}
	counts, err := u.counts(ctx, queries)
	if err != nil {
		return figures{}, err
	}
	figuresOf := func(c []int64) figures {
		f := figures{JobsPerS: fmt.Sprintf("%.2f", float64(c[per-1])/60)}
		for i, st := range job.Statuses {
			f.Settled = append(f.Settled, statusCount{st, c[i]})
		}
		return f
	}
	for i := range counted {
		counted[i].figures = figuresOf(counts[(i+1)*per : (i+2)*per])
	}
	return figuresOf(counts[:per]), nil
}

// queues reads the tenant consumers of every queue, served by a worker now or not (tenant's only
// when it is not empty): per queue and tenant, whether a worker serves it, jobs waiting, delivered
// but not acked (running), and how long the oldest waiting job has waited. One listing serves
// every row, and one get each row's oldest wait (for the first oldestRows).
func (u *UI) queues(ctx context.Context, tenant string, workers []heartbeat) ([]queueRow, error) {
	js, err := jetstream.New(u.o.NATS)
	if err != nil {
		return nil, err
	}
	subjects := u.o.Client.Subjects()
	backlogs, err := queue.Tenants(ctx, js, subjects)
	if err != nil {
		return nil, fmt.Errorf("queues: %w", err)
	}
	served := map[string]bool{}
	for _, w := range workers {
		for q := range strings.SplitSeq(w.Queues, ",") {
			served[strings.TrimSpace(q)] = true
		}
	}
	pairs := slices.Collect(maps.Keys(backlogs))
	if tenant != "" {
		pairs = slices.DeleteFunc(pairs, func(p queue.Pair) bool { return p.Tenant != tenant })
	}
	slices.SortFunc(pairs, func(a, b queue.Pair) int {
		return cmp.Or(cmp.Compare(a.Queue, b.Queue), cmp.Compare(a.Tenant, b.Tenant))
	})
	jobs, streamErr := js.Stream(ctx, subjects.JobsStream())
	now := time.Now()
	rows := make([]queueRow, 0, len(pairs))
	for i, p := range pairs {
		b := backlogs[p]
		row := queueRow{Queue: p.Queue, Tenant: p.Tenant, Served: served[p.Queue], Waiting: b.Pending, Running: uint64(b.AckPending)}
		if b.Pending > 0 && i < oldestRows && streamErr == nil {
			if at, err := queue.OldestWaiting(ctx, jobs, subjects, p, b); err != nil {
				row.Err = err.Error()
			} else if !at.IsZero() {
				row.OldestWait = max(now.Sub(at), 0).Round(time.Second).String()
			}
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func (u *UI) jobs(w http.ResponseWriter, r *http.Request) {
	s := sessionOf(r)
	v := r.URL.Query()
	q := job.ListQuery{Status: job.Status(v.Get("status")), Queue: v.Get("queue"), Tenant: v.Get("tenant"), Cursor: v.Get("cursor"), Limit: 50}
	if !s.Operator {
		q.Tenant = s.Tenant
	}
	data := map[string]any{"Filter": v, "Statuses": job.Statuses, "Operator": s.Operator}
	var err error
	now := time.Now()
	if x := v.Get("since"); x != "" && err == nil {
		q.Since, err = job.ParseTime(x, now)
	}
	if x := v.Get("until"); x != "" && err == nil {
		q.Until, err = job.ParseTime(x, now)
	}
	var l job.JobList
	if err == nil {
		ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
		l, err = u.o.Client.ListJobs(ctx, q)
		cancel()
	}
	if err != nil {
		data["Error"] = err.Error()
	}
	data["Jobs"] = l.Jobs
	if l.Cursor != "" {
		next := url.Values{}
		for k := range v {
			next.Set(k, v.Get(k))
		}
		next.Set("cursor", l.Cursor)
		data["Next"] = "/ui/jobs?" + next.Encode()
	}
	u.render(w, r, http.StatusOK, "jobs", data)
}

// jobTenant is the tenant of the job r's page names: a tenant's session names a job of its own
// tenant whatever the id (another tenant's job of the same id is another job, never reached), and
// the operator's names the tenant with ?tenant= (default when none). ok is false for a tenant
// that is not the session's own, or not a valid name.
func jobTenant(s Session, r *http.Request) (tenant string, ok bool) {
	t := r.URL.Query().Get("tenant")
	switch {
	case !s.Operator:
		return s.Tenant, t == "" || t == s.Tenant
	case t == "":
		return job.DefaultTenant, true
	}
	return t, job.ValidTenant(t)
}

// jobAccess says which tenant's job r's page shows and whether the session may see it, and reads
// its request when the view can: its JSON, indented, and its header.
func (u *UI) jobAccess(ctx context.Context, s Session, r *http.Request) (tenant, request string, header nats.Header, ok bool) {
	tenant, ok = jobTenant(s, r)
	if !ok || u.o.Request == nil {
		return tenant, "", nil, ok
	}
	stored, err := u.o.Request(ctx, tenant, r.PathValue("id"))
	if err != nil {
		return tenant, "", nil, true
	}
	var pretty strings.Builder
	enc := json.NewEncoder(&pretty)
	enc.SetIndent("", "  ")
	if enc.Encode(stored.Body) != nil {
		return tenant, string(stored.Body), stored.Header, true
	}
	return tenant, pretty.String(), stored.Header, true
}

// operatorFinds answers the operator's page of job id named without ?tenant=, as the API's lookup
// does: one tenant other than default holds the id, a redirect to its page; several, a 409 that
// names them. It reports whether it answered; otherwise the page is default's.
func (u *UI) operatorFinds(ctx context.Context, w http.ResponseWriter, r *http.Request, id string) bool {
	if !sessionOf(r).Operator || r.URL.Query().Has("tenant") || u.o.Inspector == nil {
		return false
	}
	tenants, err := u.o.Inspector.Tenants(ctx, id)
	switch {
	case err != nil || len(tenants) == 0 || (len(tenants) == 1 && tenants[0] == job.DefaultTenant):
		return false
	case len(tenants) == 1:
		http.Redirect(w, r, jobPage(tenants[0], id), http.StatusSeeOther)
	default:
		u.fail(w, r, http.StatusConflict, fmt.Sprintf("tenants %s hold a job %s: name one with ?tenant=", strings.Join(tenants, ", "), id))
	}
	return true
}

type outputLine struct {
	Stream, Text string
}

func (u *UI) job(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !job.ValidID(id) {
		u.fail(w, r, http.StatusBadRequest, "not a job id")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	if u.operatorFinds(ctx, w, r, id) {
		return
	}
	tenant, request, header, ok := u.jobAccess(ctx, sessionOf(r), r)
	if !ok {
		u.fail(w, r, http.StatusNotFound, "no job "+id+" of yours")
		return
	}
	f, notify, leave := u.hub.view(tenant, id)
	f.settle(ctx, notify, 500*time.Millisecond)
	st := f.since(0)
	leave()
	if errors.Is(st.err, runfleet.ErrNotFound) {
		u.fail(w, r, http.StatusNotFound, "the fleet holds no job "+id)
		return
	}
	var out []outputLine
	attempts := map[int64]bool{}
	for _, p := range st.pages {
		out = append(out, outputLine{p.Stream, strings.ToValidUTF8(string(p.Data), "\uFFFD")})
		attempts[p.Attempt] = true
	}
	data := map[string]any{"ID": id, "Tenant": tenant, "Request": request, "Output": out, "Next": st.next, "Cut": st.cut,
		"Attempts": len(attempts)}
	data["Timeline"] = timelineOf(st.settled, attempts)
	data["Source"], data["HasSource"] = sourceOf(request)
	if l, ok := traceOf(header, u.o.TraceURL); ok {
		data["Trace"] = l
	}
	if st.err != nil {
		data["Error"] = st.err.Error()
	}
	if st.settled != nil {
		raw, _ := json.MarshalIndent(st.settled, "", "  ")
		data["Settlement"], data["SettlementJSON"] = st.settled, string(raw)
		data["Redrivable"] = st.settled.Status.Redrivable()
		data["MayHaveRun"] = st.settled.Status == job.StatusUnknown
	}
	u.render(w, r, http.StatusOK, "job", data)
}

// jobLive streams job id's pages from the ?from=N'th on, then its end: events "page"
// ({"stream","text"}) and "end" (the status, or an error).
func (u *UI) jobLive(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !job.ValidID(id) {
		http.Error(w, "not a job id", http.StatusBadRequest)
		return
	}
	tenant, ok := jobTenant(sessionOf(r), r)
	if !ok {
		http.Error(w, "no such job of yours", http.StatusNotFound)
		return
	}
	from, _ := strconv.Atoi(r.URL.Query().Get("from"))
	events, err := sse.Start(w)
	if err != nil {
		return
	}
	f, notify, leave := u.hub.view(tenant, id)
	defer leave()
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	for {
		st := f.since(from)
		for _, p := range st.pages {
			b, _ := json.Marshal(outputLine{p.Stream, strings.ToValidUTF8(string(p.Data), "\uFFFD")})
			if events.Send(sse.Event{Name: "page", Data: string(b)}) != nil {
				return
			}
		}
		from = st.next
		if st.finished {
			end := "ended"
			switch {
			case st.settled != nil:
				end = string(st.settled.Status)
			case st.err != nil:
				end = "error: " + st.err.Error()
			}
			events.Send(sse.Event{Name: "end", Data: end})
			return
		}
		select {
		case <-notify:
		case <-keepalive.C:
			if events.Comment("keepalive") != nil {
				return
			}
		case <-r.Context().Done():
			return
		}
	}
}

func (u *UI) cancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	tenant, ok := jobTenant(sessionOf(r), r)
	if !ok || !job.ValidID(id) {
		u.fail(w, r, http.StatusNotFound, "no job "+id+" of yours")
		return
	}
	c, err := u.o.Inspector.Tenant(tenant)
	if err == nil {
		err = c.Cancel(ctx, id)
	}
	if err != nil && !errors.Is(err, runfleet.ErrSettled) {
		u.fail(w, r, http.StatusConflict, "cancel: "+err.Error())
		return
	}
	http.Redirect(w, r, jobPage(tenant, id), http.StatusSeeOther)
}

func (u *UI) redrive(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	tenant, ok := jobTenant(sessionOf(r), r)
	if !ok || !job.ValidID(id) {
		u.fail(w, r, http.StatusNotFound, "no job "+id+" of yours")
		return
	}
	c, err := u.o.Inspector.Tenant(tenant)
	if err != nil {
		u.fail(w, r, http.StatusNotFound, "no job "+id+" of yours")
		return
	}
	out, err := c.Redrive(ctx, id, &runfleet.RedriveOptions{ConfirmMayHaveRun: r.PostFormValue("may_have_run") == "on"})
	if errors.Is(err, runfleet.ErrMayHaveRun) {
		u.fail(w, r, http.StatusConflict, "job "+id+" settled unknown: its code may have run. Tick \"it may have run\" to redrive it.")
		return
	}
	if err != nil {
		u.fail(w, r, http.StatusConflict, "redrive: "+err.Error())
		return
	}
	http.Redirect(w, r, jobPage(tenant, out.JobID), http.StatusSeeOther)
}

// jobPage is the web view's page of tenant's job id.
func jobPage(tenant, id string) string {
	return "/ui/jobs/" + id + "?" + url.Values{"tenant": {tenant}}.Encode()
}

func (u *UI) artifact(w http.ResponseWriter, r *http.Request) {
	tenant, ok := jobTenant(sessionOf(r), r)
	if !ok || u.o.Artifact == nil {
		http.NotFound(w, r)
		return
	}
	// The gateway's handler reads the job of the tenant named, as for the operator's key.
	q := r.URL.Query()
	q.Set("tenant", tenant)
	r = r.Clone(r.Context())
	r.URL.RawQuery = q.Encode()
	u.o.Artifact.ServeHTTP(w, r)
}

type tenantRow struct {
	Name, Policy string
	Settled      int64
	Load         Load
}

func (u *UI) tenants(w http.ResponseWriter, r *http.Request) {
	s := sessionOf(r)
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	data := map[string]any{}
	var rows []tenantRow
	js, err := jetstream.New(u.o.NATS)
	var kv jetstream.KeyValue
	if err == nil {
		kv, err = js.KeyValue(ctx, u.o.Client.Subjects().TenantsBucket())
	}
	var names []string
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound):
		data["Note"] = "No tenant policies are set: every job is the default tenant's, with no limits."
	case err != nil:
		data["Error"] = err.Error()
	default:
		keys, kerr := kv.ListKeys(ctx)
		if kerr == nil {
			for k := range keys.Keys() {
				if !protocol.IsReservedTenantKey(k) {
					names = append(names, k)
				}
			}
		}
	}
	var loads map[string]Load
	if u.o.Loads != nil {
		var lerr error
		if loads, lerr = u.o.Loads(ctx); lerr != nil {
			data["Error"] = "current load: " + lerr.Error()
		}
		data["ShowLoad"] = true
	}
	// A tenant with jobs and no policy of its own is listed too (it runs under the default's).
	for n := range loads {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	if !s.Operator {
		names = slices.DeleteFunc(names, func(n string) bool { return n != s.Tenant })
		if len(names) == 0 {
			names = []string{s.Tenant}
		}
	}
	hour := make([]job.ListQuery, len(names))
	for i, n := range names {
		hour[i] = job.ListQuery{Tenant: n, Since: time.Now().Add(-time.Hour)}
	}
	settled, err := u.counts(ctx, hour)
	if err != nil {
		data["Error"] = "settled: " + err.Error()
	}
	for i, n := range names {
		row := tenantRow{Name: n, Policy: "–", Load: loads[n]}
		if kv != nil {
			if e, err := kv.Get(ctx, n); err == nil {
				row.Policy = redactKeys(e.Value())
			}
		}
		if settled != nil {
			row.Settled = settled[i]
		}
		rows = append(rows, row)
	}
	data["Tenants"] = rows
	u.render(w, r, http.StatusOK, "tenants", data)
}

// redactKeys shows a policy without its keys' digests: how many, not which.
func redactKeys(b []byte) string {
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		return string(b)
	}
	if keys, ok := m["api_keys_sha256"].([]any); ok {
		m["api_keys_sha256"] = fmt.Sprintf("%d keys", len(keys))
	}
	out, _ := json.Marshal(m)
	return string(out)
}
