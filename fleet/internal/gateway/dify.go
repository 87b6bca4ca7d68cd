package gateway

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/google/uuid"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/job"
)

// dify-sandbox's API (github.com/langgenius/dify-sandbox/internal/controller): every answer is
// {"code","message","data"}; code 0 and message "success" when the request was served, a negative
// code and the reason in message (data null) when not. A body it cannot bind (not JSON, language
// or code missing) is HTTP 400 with code -400 when sent as Content-Type: application/json, as Dify
// sends it (gin's BindJSON writes 400 before the handler's 200), HTTP 200 with code -400
// otherwise; an unsupported language is HTTP 400. Dify (api/core/helper/code_executor/
// code_executor.py) reads 503 as "service unavailable", any other non-200 status, a non-zero code
// or a non-empty data.error as the node's failure, and data.stdout as the result. It does not
// retry itself; a node's "retry on failure" setting reruns it on any failure. So 503 means
// nothing was stored, 504 that the job goes on, and a client gone (Dify's read timeout) cancels
// its job unless Options.CancelOnDisconnect says no.

// sandboxResponse is dify-sandbox's envelope.
type sandboxResponse struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data"`
}

// sandboxRun is the body Dify's code executor posts to /v1/sandbox/run.
type sandboxRun struct {
	Language      string `json:"language"`
	Code          string `json:"code"`
	Preload       string `json:"preload"`
	EnableNetwork bool   `json:"enable_network"` // accepted; a sandbox never has a network (G6)
}

// runResult is the data of a served /v1/sandbox/run. Error is empty exactly when the program
// succeeded: Dify takes any text there as the node's failure.
type runResult struct {
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	Error    string `json:"error"`
	ExitCode *int   `json:"exit_code"`
}

func sandboxFail(w http.ResponseWriter, status, code int, message string) {
	writeJSON(w, status, sandboxResponse{Code: code, Message: message})
}

// sandboxRefuse answers a submit that stored nothing, or may have (unconfirmed), in dify-sandbox's
// envelope: code the negated status, message the native reason and detail; past --max-waiting in
// dify-sandbox's words when it is full.
func sandboxRefuse(w http.ResponseWriter, err error) {
	e := asSubmitError(err)
	e.setRetryAfter(w)
	msg := e.Error()
	if errors.Is(e.err, errTooManyWaiting) {
		msg = "Too many requests"
	}
	sandboxFail(w, e.status, -e.status, msg)
}

// sandboxLanguages are the languages dify-sandbox serves; Dify sends jinja2 templates as python3.
var sandboxLanguages = map[string]bool{"python3": true, "nodejs": true}

// sandboxRun runs a snippet as a job and answers once it settled, with its whole output.
func (g *Gateway) sandboxRun(w http.ResponseWriter, r *http.Request) {
	body, err := g.readBody(w, r)
	if errors.Is(err, errBodyTimeout) {
		sandboxFail(w, http.StatusRequestTimeout, -400, err.Error())
		return
	}
	var rej *job.RejectError
	if errors.As(err, &rej) && rej.Reason == job.ReasonPayloadTooLarge {
		sandboxFail(w, http.StatusBadRequest, -400, err.Error())
		return
	}
	if err != nil {
		sandboxFail(w, http.StatusOK, -400, err.Error())
		return
	}
	bindStatus := http.StatusOK
	if r.Header.Get("Content-Type") == "application/json" {
		bindStatus = http.StatusBadRequest
	}
	var req sandboxRun
	if err := json.Unmarshal(body, &req); err != nil {
		sandboxFail(w, bindStatus, -400, "invalid request body: "+err.Error())
		return
	}
	switch {
	case req.Language == "" || req.Code == "":
		sandboxFail(w, bindStatus, -400, "language and code are required")
		return
	case !sandboxLanguages[req.Language]:
		sandboxFail(w, http.StatusBadRequest, -400, "unsupported language")
		return
	}
	tenant, err := submitTenant(r)
	if err != nil {
		sandboxFail(w, tenantStatus(err), -tenantStatus(err), err.Error())
		return
	}
	jr := job.Request{ID: uuid.NewString(), Language: req.Language, Code: req.Code, Preload: req.Preload,
		Limits: job.Limits{Timeout: g.o.RunTimeout, OutputBytes: g.o.MaxOutput}}
	setJobID(r, jr.ID)
	if _, err := jr.Validate(g.policy); err != nil {
		sandboxFail(w, http.StatusOK, -400, err.Error())
		return
	}
	release, err := g.submit(r, g.jobSubmission("dify", tenant, jr, true))
	if err != nil {
		sandboxRefuse(w, err)
		return
	}
	defer release()
	var stdout, stderr bytes.Buffer // output_bytes bounds them
	cancelOnDisconnect := g.o.CancelOnDisconnect == nil || *g.o.CancelOnDisconnect
	st, err := g.wait(r, g.as(tenant), jr.ID, cancelOnDisconnect, func(p runfleet.Page) error {
		if p.Stream == job.Stderr {
			stderr.Write(p.Data)
		} else {
			stdout.Write(p.Data)
		}
		return nil
	})
	switch {
	case errors.Is(err, runfleet.ErrNoSettlement):
		sandboxFail(w, http.StatusGatewayTimeout, -504, fmt.Sprintf("job %s did not settle while this request waited (--max-wait %s, or the gateway is shutting down); it goes on", jr.ID, g.o.MaxWait))
		return
	case err != nil:
		// The job is stored but its output cannot reach the caller: cancel it, so that a retry
		// does not run the code beside it.
		g.log.Warn("watch", "job_id", jr.ID, "err", err)
		g.cancelJob(r.Context(), g.as(tenant), jr.ID, "watch failed")
		sandboxFail(w, http.StatusBadGateway, -502, watchFailure(err)+": could not follow job "+jr.ID+"; it was cancelled")
		return
	case st.Status == job.StatusRejected:
		sandboxFail(w, http.StatusOK, -400, cmp.Or(strings.TrimSpace(string(st.Reason)+": "+st.Detail), string(st.Reason)))
		return
	}
	res := runResult{Stdout: stdout.String(), Stderr: stderr.String(), ExitCode: st.ExitCode, Error: failure(st, stderr.String())}
	writeJSON(w, http.StatusOK, sandboxResponse{Code: 0, Message: "success", Data: res})
}

// failure is what Dify shows when a job did not succeed: the program's own error output when it
// exited non-zero (a traceback), else what stopped it. It is empty for a success.
func failure(st job.Settlement, stderr string) string {
	switch st.Status {
	case job.StatusSucceeded:
		return ""
	case job.StatusFailed:
		switch st.Reason {
		case job.ReasonExitNonzero:
			if s := strings.TrimSpace(stderr); s != "" {
				return s
			}
			if st.ExitCode != nil {
				return fmt.Sprintf("error: exit status %d", *st.ExitCode)
			}
		case job.ReasonSignal:
			return "error: killed by signal " + st.Signal
		case job.ReasonOOM:
			return "error: out of memory"
		case job.ReasonOutputLimit:
			return "error: output limit exceeded"
		case job.ReasonPageLimit:
			return "error: too many output pages"
		}
	case job.StatusTimedOut:
		return "error: timeout"
	}
	s := "error: job " + string(st.Status)
	if st.Reason != "" {
		s += " (" + string(st.Reason) + ")"
	}
	return s
}

// sandboxDependencies lists the Python packages the profile ships, as dify-sandbox does: those the
// serving workers announce for it (their root fs's), or the gateway's list where none does.
func (g *Gateway) sandboxDependencies(w http.ResponseWriter, r *http.Request) {
	lang := r.URL.Query().Get("language")
	switch {
	case lang == "":
		sandboxFail(w, http.StatusOK, -400, "language is required")
		return
	case lang != "python3":
		sandboxFail(w, http.StatusBadRequest, -400, "unsupported language")
		return
	}
	// What the serving workers announce, where one does; otherwise the gateway's own list
	// (--dependencies, --rootfs).
	deps := g.o.Dependencies[lang]
	if workers, err := g.announced(r.Context()); err != nil {
		g.log.Warn("ask the workers for their languages", "err", err)
	} else if announced, ok := announcedPackages(workers, lang); ok {
		deps = announced
	}
	if deps == nil {
		deps = []Dependency{}
	}
	writeJSON(w, http.StatusOK, sandboxResponse{Code: 0, Message: "success", Data: struct {
		Dependencies []Dependency `json:"dependencies"`
	}{deps}})
}

// ParseDependencies reads a list of packages in the format of `pip freeze` (name==version, one a
// line; blank lines and # comments are skipped), as an operator lists what a root fs ships:
// `chroot ROOTFS python3 -m pip freeze`.
func ParseDependencies(r io.Reader) ([]Dependency, error) {
	deps := []Dependency{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, version, ok := strings.Cut(line, "==")
		if !ok || strings.TrimSpace(name) == "" {
			return nil, fmt.Errorf("line %d: %q: want name==version", n, line)
		}
		deps = append(deps, Dependency{Name: strings.TrimSpace(name), Version: strings.TrimSpace(version)})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read dependencies: %w", err)
	}
	return deps, nil
}
