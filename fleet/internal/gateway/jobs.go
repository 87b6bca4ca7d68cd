package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/tracing"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// accepted is the answer to a stored job that the caller does not (or no longer) wait for.
type accepted struct {
	JobID string `json:"job_id"`
}

// postJob stores a native job request: 202 once stored, or 200 with the settlement with
// ?wait=true.
func (g *Gateway) postJob(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	wait, err := boolParam(q.Get("wait"), false)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_query", "wait: "+err.Error())
		return
	}
	cancelOnDisconnect, err := boolParam(q.Get("cancel_on_disconnect"), g.o.CancelOnDisconnect != nil && *g.o.CancelOnDisconnect)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_query", "cancel_on_disconnect: "+err.Error())
		return
	}
	queue := q.Get("queue")
	if queue == "" {
		queue = g.o.Queue
	}
	if !job.ValidQueue(queue) {
		writeError(w, http.StatusBadRequest, "invalid_queue", fmt.Sprintf("queue %q is not a valid queue name", clip(queue)))
		return
	}
	tenant, err := submitTenant(r)
	if err != nil {
		writeTenantError(w, err)
		return
	}
	body, err := g.readBody(w, r)
	if err != nil {
		writeReject(w, err)
		return
	}
	id, fresh, err := g.decode(body)
	if err != nil {
		writeReject(w, err)
		return
	}
	setJobID(r, id)
	release, err := g.submit(r, submission{api: "native", tenant: tenant, queue: queue, id: id, fresh: fresh, body: body, waits: wait})
	if err != nil {
		writeSubmitError(w, id, err)
		return
	}
	defer release()
	w.Header().Set("Location", "/v1/jobs/"+id)
	if !wait {
		writeJSON(w, http.StatusAccepted, accepted{JobID: id})
		return
	}
	st, err := g.wait(r, g.as(tenant), id, cancelOnDisconnect, nil)
	if err != nil {
		// Past --max-wait, at shutdown, or a watch that failed: the job is stored and goes on.
		if !errors.Is(err, runfleet.ErrNoSettlement) {
			g.log.Warn("watch", "job_id", id, "err", err)
		}
		writeJSON(w, http.StatusAccepted, accepted{JobID: id})
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// writeSubmitError answers natively a submit that stored nothing, or may have stored job id
// (unconfirmed, with its job_id): {"reason","detail"}, and the numbers of the tenant's bound
// that refused it.
func writeSubmitError(w http.ResponseWriter, id string, err error) {
	e := asSubmitError(err)
	e.setRetryAfter(w)
	body := errorBody{Reason: e.reason, Detail: e.detail}
	var qf *queueFullError
	var sf *protocol.StorageFullError
	switch {
	case errors.As(e.err, &qf):
		writeJSON(w, e.status, struct {
			errorBody
			Tenant    string `json:"tenant"`
			Queued    int64  `json:"queued"`
			MaxQueued int64  `json:"max_queued"`
		}{body, qf.tenant, qf.queued, qf.limit})
	case errors.As(e.err, &sf):
		writeJSON(w, e.status, struct {
			errorBody
			Tenant string `json:"tenant"`
			Bound  string `json:"bound"`
			Used   int64  `json:"used"`
			Limit  int64  `json:"limit"`
		}{body, sf.Tenant, sf.Bound, sf.Used, sf.Limit})
	case errors.Is(e.err, errUnconfirmed):
		writeJSON(w, e.status, struct {
			errorBody
			JobID string `json:"job_id"`
		}{body, id})
	default:
		writeJSON(w, e.status, body)
	}
}

// publishOnce stores body as c's tenant's job id on queue, unless the tenant holds a job of id
// on any queue: then it is a duplicate, as a second publish on the same queue is (the stream's
// one message per subject). The check is one direct get; two publishes racing on two queues
// may both be stored, and the worker refuses the later as duplicate_id (its record names the
// tenant and the id). Without lookup (an id no job can hold yet) it publishes at once.
func (g *Gateway) publishOnce(ctx context.Context, c *runfleet.Client, queue, id string, body []byte, lookup bool) (runfleet.Submitted, error) {
	if lookup {
		_, err := c.Request(ctx, id)
		if err == nil {
			return runfleet.Submitted{ID: id, Duplicate: true}, nil
		}
		if !errors.Is(err, runfleet.ErrNotFound) {
			return runfleet.Submitted{ID: id}, err
		}
	}
	return g.inspector.SubmitRaw(ctx, queue, id, body, &runfleet.SubmitOptions{Tenant: c.Tenant(), Header: tracing.Header(ctx)})
}

// decode validates body as the protocol does and returns the job's id: the body's own, or a new
// one (fresh) when it has none. The error, when not nil, is a *job.RejectError.
func (g *Gateway) decode(body []byte) (id string, fresh bool, err error) {
	var peek struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(body, &peek) == nil && len(peek.ID) > 0 {
		if err := json.Unmarshal(peek.ID, &id); err != nil {
			return "", false, &job.RejectError{Reason: "invalid_id", Detail: "id: want a string"}
		}
	}
	if id == "" {
		id, fresh = uuid.NewString(), true
	}
	if _, _, err := job.Decode(body, id, g.policy); err != nil {
		return "", false, err
	}
	return id, fresh, nil
}

// wait follows c's tenant's job id until it settles, the request ends, or MaxWait passes; onPage,
// when not nil, sees every page. It returns runfleet.ErrNoSettlement (wrapped) when it stopped
// before the settlement. A client gone away cancels the job only when it asked to.
func (g *Gateway) wait(r *http.Request, c *runfleet.Client, id string, cancelOnDisconnect bool, onPage func(runfleet.Page) error) (job.Settlement, error) {
	defer g.metrics.watching()()
	ctx, cancel := context.WithTimeout(r.Context(), g.o.MaxWait)
	defer cancel()
	st, err := c.Watch(ctx, id, onPage)
	if errors.Is(err, runfleet.ErrNoSettlement) && cancelOnDisconnect && r.Context().Err() != nil && !g.draining.Load() {
		g.cancelJob(r.Context(), c, id, "client disconnected")
	}
	return st, err
}

// cancelJob cancels c's tenant's job id for the reason given, whether or not ctx has ended, and
// logs what came of it.
func (g *Gateway) cancelJob(ctx context.Context, c *runfleet.Client, id, why string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	if err := c.Cancel(ctx, id); err != nil {
		g.log.Warn("cancel", "job_id", id, "why", why, "err", err)
		return
	}
	g.log.Info("job cancelled", "job_id", id, "why", why)
}

// errTooManyConsumers is JetStream's answer when a stream holds its maximum of consumers
// (nats-server's default_max_consumers, 1,000 unless configured): one per live watch.
const errTooManyConsumers = 10026

// watchFailure names why a watch failed: the consumer limit, or NATS.
func watchFailure(err error) string {
	var api *jetstream.APIError
	if errors.As(err, &api) && api.ErrorCode == errTooManyConsumers {
		return "too_many_watches"
	}
	return "unavailable"
}

// settlement answers the settlement as stored, or 404 while there is none.
func (g *Gateway) settlement(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	c, ok := g.jobClient(w, r, id)
	if !ok {
		return
	}
	raw, ok := g.stored(w, r.Context(), c, id)
	if ok {
		writeRaw(w, http.StatusOK, raw)
	}
}

// stored reads c's tenant's job id's settlement; it answers 404 or 503 itself and reports false
// when there is none.
func (g *Gateway) stored(w http.ResponseWriter, ctx context.Context, c *runfleet.Client, id string) (json.RawMessage, bool) {
	if !g.nc.IsConnected() {
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the fleet's NATS is unreachable; retry later")
		return nil, false
	}
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	raw, err := c.SettlementJSON(ctx, id)
	switch {
	case errors.Is(err, runfleet.ErrNoSettlement):
		writeError(w, http.StatusNotFound, "not_settled", "no settlement of job "+id+" is stored (yet)")
		return nil, false
	case errors.Is(err, runfleet.ErrNotFound), errors.Is(err, runfleet.ErrExpired):
		b := lookupFailure(id, err)
		writeError(w, http.StatusNotFound, b.Reason, b.Detail)
		return nil, false
	case err != nil:
		g.log.Warn("read settlement", "job_id", id, "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "could not read the settlement; retry later")
		return nil, false
	}
	return raw, true
}

func (g *Gateway) cancel(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	c, ok := g.jobClient(w, r, id)
	if !ok {
		return
	}
	if !g.nc.IsConnected() {
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the fleet's NATS is unreachable; retry later")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), publishTimeout)
	defer cancel()
	err := c.Cancel(ctx, id)
	switch {
	case errors.Is(err, runfleet.ErrNotFound), errors.Is(err, runfleet.ErrExpired):
		b := lookupFailure(id, err)
		writeError(w, http.StatusNotFound, b.Reason, b.Detail)
	case errors.Is(err, runfleet.ErrSettled):
		writeError(w, http.StatusConflict, "settled", "job "+id+" has already settled")
	case err != nil:
		g.log.Warn("cancel", "job_id", id, "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the fleet did not store the cancel; retry later")
	default:
		writeJSON(w, http.StatusAccepted, accepted{JobID: id})
	}
}

// lookupFailure says why a job cannot be found: never accepted, or its results expired.
func lookupFailure(id string, err error) errorBody {
	if errors.Is(err, runfleet.ErrExpired) {
		return errorBody{Reason: "expired", Detail: "the results of job " + id + " have expired"}
	}
	return errorBody{Reason: "not_found", Detail: "the fleet holds no job " + id}
}

// artifact streams a file the settlement lists, from the fleet's object store bucket.
func (g *Gateway) artifact(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	c, ok := g.jobClient(w, r, id)
	if !ok {
		return
	}
	path := r.PathValue("path")
	raw, ok := g.stored(w, r.Context(), c, id)
	if !ok {
		return
	}
	var st job.Settlement
	if err := json.Unmarshal(raw, &st); err != nil {
		writeError(w, http.StatusBadGateway, "invalid_settlement", "the stored settlement is not readable")
		return
	}
	var entry *job.Artifact
	for i := range st.Artifacts {
		if st.Artifacts[i].Path == path {
			entry = &st.Artifacts[i]
		}
	}
	if entry == nil {
		writeError(w, http.StatusNotFound, "no_artifact", fmt.Sprintf("the settlement of job %s lists no artifact %q (a job keeps artifacts when its request names outputs)", id, clip(path)))
		return
	}
	store, err := g.js.ObjectStore(r.Context(), g.subjects.ArtifactsBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		writeError(w, http.StatusNotFound, "no_artifact", "the fleet has no artifacts bucket "+g.subjects.ArtifactsBucket())
		return
	}
	if err != nil {
		g.log.Warn("artifacts bucket", "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "could not open the artifacts bucket; retry later")
		return
	}
	obj, err := store.Get(r.Context(), entry.Object)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		writeError(w, http.StatusNotFound, "no_artifact", "artifact "+clip(path)+" is listed but no longer stored (expired with the results)")
		return
	}
	if err != nil {
		g.log.Warn("artifact", "job_id", id, "object", entry.Object, "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "could not read the artifact; retry later")
		return
	}
	defer obj.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Disposition", attachment(path))
	w.Header().Set("Content-Length", strconv.FormatInt(entry.Size, 10))
	if entry.SHA256 != "" {
		w.Header().Set("ETag", `"sha256:`+entry.SHA256+`"`)
	}
	if _, err := io.Copy(w, obj); err != nil {
		g.log.Warn("send artifact", "job_id", id, "object", entry.Object, "err", err)
	}
}

// attachment is the Content-Disposition of an artifact: a download, named by the path's last
// element. The job chose the name, so a browser gets no directory, no control character (a
// terminal escape, a forged header line) and only valid UTF-8, which RFC 2231 encodes.
func attachment(path string) string {
	name := strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == '/' || r == '\\' {
			return '_'
		}
		return r
	}, strings.ToValidUTF8(path[strings.LastIndexByte(path, '/')+1:], "\uFFFD"))
	if name == "" || name == "." || name == ".." {
		name = "artifact"
	}
	return mime.FormatMediaType("attachment", map[string]string{"filename": name})
}

func pathID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if !job.ValidID(id) {
		writeError(w, http.StatusBadRequest, string(job.ReasonInvalidID), fmt.Sprintf("job id %q does not match ^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$", clip(id)))
		return "", false
	}
	return id, true
}

// errBodyTimeout is a body that did not arrive within Options.BodyTimeout.
var errBodyTimeout = errors.New("the request body did not arrive in time")

// readBody reads the request body: at most the protocol's limit, within Options.BodyTimeout, so
// that a client sending a body slowly (or never) holds no request for longer. A larger body is a
// payload_too_large rejection.
func (g *Gateway) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(g.o.BodyTimeout)) // a writer without deadlines reads without
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(g.policy.MaxBodyBytes)))
	if err != nil {
		// The deadline stays, and the connection closes after the answer: the server would
		// otherwise wait for the rest of the body before answering.
		w.Header().Set("Connection", "close")
	} else {
		_ = rc.SetReadDeadline(time.Time{})
	}
	var tooLarge *http.MaxBytesError
	var nerr net.Error
	switch {
	case errors.As(err, &tooLarge):
		return nil, &job.RejectError{Reason: job.ReasonPayloadTooLarge, Detail: fmt.Sprintf("body over %d bytes", g.policy.MaxBodyBytes)}
	case errors.As(err, &nerr) && nerr.Timeout():
		return nil, fmt.Errorf("%w (%s)", errBodyTimeout, g.o.BodyTimeout)
	case err != nil:
		return nil, &job.RejectError{Reason: job.ReasonInvalidJSON, Detail: "read body: " + err.Error()}
	}
	return body, nil
}

func writeReject(w http.ResponseWriter, err error) {
	if errors.Is(err, errBodyTimeout) {
		writeError(w, http.StatusRequestTimeout, "body_timeout", err.Error())
		return
	}
	var rej *job.RejectError
	if errors.As(err, &rej) {
		writeError(w, http.StatusBadRequest, string(rej.Reason), rej.Detail)
		return
	}
	writeError(w, http.StatusBadRequest, string(job.ReasonInvalidJSON), err.Error())
}

func boolParam(v string, def bool) (bool, error) {
	if v == "" {
		return def, nil
	}
	return strconv.ParseBool(v)
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
