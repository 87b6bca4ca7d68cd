package gateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	runfleet "github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// piston's API (engineer-man/piston, api/src/api/v2.js): the routes its clients call, answered
// from the languages the serving workers announce. A job runs as one submitted to /v1/jobs does:
// the caller's tenant, its admission and its limits.

// pistonRuntime is one entry of GET /api/v2/runtimes.
type pistonRuntime struct {
	Language string   `json:"language"`
	Version  string   `json:"version"`
	Aliases  []string `json:"aliases"`
}

// pistonRuntimes lists the languages the serving workers announce, each once, with their
// aliases but judge0's numeric ids.
func (g *Gateway) pistonRuntimes(w http.ResponseWriter, r *http.Request) {
	workers, err := g.announced(r.Context())
	if err != nil {
		pistonFail(w, http.StatusServiceUnavailable, "the fleet is unreachable: "+err.Error())
		return
	}
	out := []pistonRuntime{}
	for _, langs := range workers {
		for _, l := range langs {
			if slices.ContainsFunc(out, func(p pistonRuntime) bool { return p.Language == l.Name }) {
				continue
			}
			aliases := slices.DeleteFunc(slices.Clone(l.Aliases), func(a string) bool { _, ok := judge0ID(a); return ok })
			out = append(out, pistonRuntime{Language: l.Name, Version: l.Version, Aliases: aliases})
		}
	}
	slices.SortFunc(out, func(a, b pistonRuntime) int { return strings.Compare(a.Language, b.Language) })
	writeJSON(w, http.StatusOK, out)
}

// pistonExecuteRequest is piston's execute body. The compile limits are the language manifest's,
// not the caller's: they are accepted and not applied.
type pistonExecuteRequest struct {
	Language string `json:"language"`
	Version  string `json:"version"`
	Files    []struct {
		Name     string `json:"name"`
		Content  string `json:"content"`
		Encoding string `json:"encoding"`
	} `json:"files"`
	Stdin              string   `json:"stdin"`
	Args               []string `json:"args"`
	RunTimeout         int64    `json:"run_timeout"`
	CompileTimeout     int64    `json:"compile_timeout"`
	RunMemoryLimit     int64    `json:"run_memory_limit"`
	CompileMemoryLimit int64    `json:"compile_memory_limit"`
}

// pistonStage is the compile or run stage of piston's answer.
type pistonStage struct {
	Stdout string  `json:"stdout"`
	Stderr string  `json:"stderr"`
	Code   *int    `json:"code"`
	Signal *string `json:"signal"`
	Output string  `json:"output"`
}

type pistonResult struct {
	Language string       `json:"language"`
	Version  string       `json:"version"`
	Run      *pistonStage `json:"run,omitempty"`
	Compile  *pistonStage `json:"compile,omitempty"`
}

func pistonFail(w http.ResponseWriter, status int, message string) {
	writeJSON(w, status, struct {
		Message string `json:"message"`
	}{message})
}

// pistonExecute runs piston's request as a job and answers once it settled: the first file is
// the code, the others are the job's files. A compile error answers a compile stage (code 1, the
// compiler's output) and no run stage, as piston does.
func (g *Gateway) pistonExecute(w http.ResponseWriter, r *http.Request) {
	body, err := g.readBody(w, r)
	if err != nil {
		pistonFail(w, http.StatusBadRequest, err.Error())
		return
	}
	var req pistonExecuteRequest
	if err := json.Unmarshal(body, &req); err != nil {
		pistonFail(w, http.StatusBadRequest, "invalid request body: "+err.Error())
		return
	}
	switch {
	case req.Language == "":
		pistonFail(w, http.StatusBadRequest, "language is required as a string")
		return
	case len(req.Files) == 0:
		pistonFail(w, http.StatusBadRequest, "files is required as an array")
		return
	}
	workers, err := g.announced(r.Context())
	if err != nil {
		pistonFail(w, http.StatusServiceUnavailable, "the fleet is unreachable: "+err.Error())
		return
	}
	lang, ok := findLanguage(workers, req.Language)
	if !ok || (req.Version != "" && req.Version != "*" && req.Version != lang.Version) {
		pistonFail(w, http.StatusBadRequest, fmt.Sprintf("%s-%s runtime is unknown", req.Language, req.Version))
		return
	}
	jr := job.Request{ID: uuid.NewString(), Language: lang.Name, Stdin: req.Stdin, Args: req.Args,
		Limits: job.Limits{Timeout: g.o.RunTimeout, OutputBytes: g.o.MaxOutput}}
	if req.RunTimeout > 0 {
		jr.Limits.Timeout = time.Duration(req.RunTimeout) * time.Millisecond
	}
	if req.RunMemoryLimit > 0 {
		jr.Limits.MemoryBytes = req.RunMemoryLimit
	}
	for i, f := range req.Files {
		content, err := pistonContent(f.Content, f.Encoding)
		if err != nil {
			pistonFail(w, http.StatusBadRequest, fmt.Sprintf("files[%d]: %v", i, err))
			return
		}
		if i == 0 {
			jr.Code = string(content)
			continue
		}
		jr.Files = append(jr.Files, job.File{Path: f.Name, Content: content})
	}
	setJobID(r, jr.ID)
	if _, err := jr.Validate(g.policy); err != nil {
		pistonFail(w, http.StatusBadRequest, err.Error())
		return
	}
	tenant, err := submitTenant(r)
	if err != nil {
		pistonFail(w, tenantStatus(err), err.Error())
		return
	}
	release, err := g.submit(r, g.jobSubmission("piston", tenant, jr, true))
	if err != nil {
		e := asSubmitError(err)
		e.setRetryAfter(w)
		pistonFail(w, e.status, e.Error())
		return
	}
	defer release()
	st, stdout, stderr, status, err := g.collect(r, g.as(tenant), jr.ID, g.o.MaxWait)
	if err != nil {
		pistonFail(w, status, err.Error())
		return
	}
	if !st.Status.Ran() {
		pistonFail(w, http.StatusInternalServerError, fmt.Sprintf("job %s settled %s/%s", jr.ID, st.Status, st.Reason))
		return
	}
	res := pistonResult{Language: lang.Name, Version: lang.Version}
	stage := &pistonStage{Stdout: stdout, Stderr: stderr, Code: st.ExitCode, Output: stdout + stderr}
	if st.Signal != "" {
		stage.Signal = &st.Signal
	}
	if st.Status == job.StatusTimedOut {
		kill := "SIGKILL"
		stage.Signal, stage.Code = &kill, nil
	}
	if st.Reason == job.ReasonCompileError {
		res.Compile = stage
	} else {
		res.Run = stage
	}
	writeJSON(w, http.StatusOK, res)
}

// pistonContent decodes a file's content by piston's encodings.
func pistonContent(content, encoding string) ([]byte, error) {
	switch encoding {
	case "", "utf8":
		return []byte(content), nil
	case "base64":
		return base64.StdEncoding.DecodeString(content)
	case "hex":
		return hex.DecodeString(content)
	}
	return nil, fmt.Errorf("encoding %q: want utf8, base64 or hex", encoding)
}

// findLanguage returns the language of a serving worker that name names, by name or alias.
func findLanguage(workers [][]protocol.Language, name string) (protocol.Language, bool) {
	for _, langs := range workers {
		for _, l := range langs {
			if l.Name == name || slices.Contains(l.Aliases, name) {
				return l, true
			}
		}
	}
	return protocol.Language{}, false
}

// collect waits up to wait for job id's settlement and returns it with the job's whole output.
// A job not settled by then is runfleet.ErrNoSettlement (wrapped), with status 504.
func (g *Gateway) collect(r *http.Request, c *runfleet.Client, id string, wait time.Duration) (st job.Settlement, stdout, stderr string, status int, err error) {
	var out, errb bytes.Buffer // output_bytes bounds them
	cancelOnDisconnect := g.o.CancelOnDisconnect == nil || *g.o.CancelOnDisconnect
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	st, err = g.wait(r.WithContext(ctx), c, id, cancelOnDisconnect && wait == g.o.MaxWait, func(p runfleet.Page) error {
		if p.Stream == job.Stderr {
			errb.Write(p.Data)
		} else {
			out.Write(p.Data)
		}
		return nil
	})
	switch {
	case errors.Is(err, runfleet.ErrNoSettlement):
		return st, "", "", http.StatusGatewayTimeout, fmt.Errorf("job %s did not settle while this request waited: %w", id, err)
	case err != nil:
		g.log.Warn("watch", "job_id", id, "err", err)
		g.cancelJob(r.Context(), c, id, "watch failed")
		return st, "", "", http.StatusBadGateway, fmt.Errorf("%s: could not follow job %s; it was cancelled", watchFailure(err), id)
	case st.Status == job.StatusRejected:
		return st, "", "", http.StatusBadRequest, fmt.Errorf("%s: %s", st.Reason, st.Detail)
	}
	return st, out.String(), errb.String(), http.StatusOK, nil
}
