package gateway

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	runfleet "github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/job"
)

// judge0's API (judge0 CE, its documented routes): its clients submit by language id, which a
// manifest's numeric alias is, and read judge0's statuses. A submission's token is its job id; a
// job runs as one submitted to /v1/jobs does: the caller's tenant, its admission and its limits.

// judge0Language is one entry of GET /languages.
type judge0Language struct {
	ID   int    `json:"id"`
	Name string `json:"name"`
}

// judge0ID is the judge0 language id alias names, if it names one: written as a submission's
// language_id is looked up (strconv.Itoa), so that every id listed can be submitted.
func judge0ID(alias string) (int, bool) {
	id, err := strconv.Atoi(alias)
	return id, err == nil && id > 0 && strconv.Itoa(id) == alias
}

// judge0Languages lists the judge0 ids the serving workers' languages answer to.
func (g *Gateway) judge0Languages(w http.ResponseWriter, r *http.Request) {
	workers, err := g.announced(r.Context())
	if err != nil {
		judge0Fail(w, http.StatusServiceUnavailable, "the fleet is unreachable: "+err.Error())
		return
	}
	out := []judge0Language{}
	for _, langs := range workers {
		for _, l := range langs {
			for _, a := range l.Aliases {
				id, ok := judge0ID(a)
				if !ok || slices.ContainsFunc(out, func(j judge0Language) bool { return j.ID == id }) {
					continue
				}
				out = append(out, judge0Language{ID: id, Name: strings.TrimSpace(l.Name + " (" + l.Version + ")")})
			}
		}
	}
	slices.SortFunc(out, func(a, b judge0Language) int { return a.ID - b.ID })
	writeJSON(w, http.StatusOK, out)
}

// judge0Submission is judge0's submission body; limits in its units (seconds, KB).
type judge0Submission struct {
	SourceCode     string  `json:"source_code"`
	LanguageID     int     `json:"language_id"`
	Stdin          string  `json:"stdin"`
	ExpectedOutput *string `json:"expected_output"`
	CPUTimeLimit   float64 `json:"cpu_time_limit"`
	WallTimeLimit  float64 `json:"wall_time_limit"`
	MemoryLimit    int64   `json:"memory_limit"`
	Args           string  `json:"command_line_arguments"`
}

// judge0Status is judge0's status of a submission.
type judge0Status struct {
	ID          int    `json:"id"`
	Description string `json:"description"`
}

// judge0Result is judge0's answer for a submission; text fields are base64 when asked.
type judge0Result struct {
	Token         string       `json:"token"`
	Stdout        *string      `json:"stdout"`
	Stderr        *string      `json:"stderr"`
	CompileOutput *string      `json:"compile_output"`
	Message       *string      `json:"message"`
	ExitCode      *int         `json:"exit_code"`
	ExitSignal    *int         `json:"exit_signal"`
	Status        judge0Status `json:"status"`
	Time          *string      `json:"time"`
	Memory        *int64       `json:"memory"`
}

func judge0Fail(w http.ResponseWriter, status int, message string) {
	writeJSON(w, status, struct {
		Error string `json:"error"`
	}{message})
}

// labelExpected keeps the hash of a submission's expected output with its job, for the wrong
// answer of a later GET: a label holds 256 bytes, an expected output more.
const labelExpected = "judge0_expected_sha256"

// judge0Job makes the job of a submission; a language id no serving worker answers to is an error.
func (g *Gateway) judge0Job(r *http.Request, s judge0Submission, b64 bool) (job.Request, error) {
	workers, err := g.announced(r.Context())
	if err != nil {
		return job.Request{}, err
	}
	lang, ok := findLanguage(workers, strconv.Itoa(s.LanguageID))
	if !ok {
		return job.Request{}, fmt.Errorf("language with id %d doesn't exist", s.LanguageID)
	}
	code, stdin := s.SourceCode, s.Stdin
	if b64 {
		for _, f := range []*string{&code, &stdin} {
			b, err := base64.StdEncoding.DecodeString(*f)
			if err != nil {
				return job.Request{}, fmt.Errorf("base64_encoded: %w", err)
			}
			*f = string(b)
		}
	}
	jr := job.Request{ID: uuid.NewString(), Language: lang.Name, Code: code, Stdin: stdin, Args: strings.Fields(s.Args),
		Limits: job.Limits{Timeout: g.o.RunTimeout, OutputBytes: g.o.MaxOutput}}
	if t := max(s.WallTimeLimit, s.CPUTimeLimit); t > 0 {
		jr.Limits.Timeout = time.Duration(t * float64(time.Second))
	}
	if s.MemoryLimit > 0 {
		jr.Limits.MemoryBytes = s.MemoryLimit << 10
	}
	if s.ExpectedOutput != nil {
		expected := *s.ExpectedOutput
		if b64 {
			b, err := base64.StdEncoding.DecodeString(expected)
			if err != nil {
				return job.Request{}, fmt.Errorf("base64_encoded: %w", err)
			}
			expected = string(b)
		}
		sum := sha256.Sum256([]byte(strings.TrimRight(expected, "\n")))
		jr.Labels = map[string]string{labelExpected: hex.EncodeToString(sum[:])}
	}
	if _, err := jr.Validate(g.policy); err != nil {
		return job.Request{}, err
	}
	return jr, nil
}

// judge0Submit answers POST /submissions: with wait=true once the job settled, 201 with the whole
// result; else 201 with the token at once.
func (g *Gateway) judge0Submit(w http.ResponseWriter, r *http.Request) {
	b64 := r.URL.Query().Get("base64_encoded") == "true"
	wait := r.URL.Query().Get("wait") == "true"
	body, err := g.readBody(w, r)
	if err != nil {
		judge0Fail(w, http.StatusBadRequest, err.Error())
		return
	}
	var s judge0Submission
	if err := json.Unmarshal(body, &s); err != nil {
		judge0Fail(w, http.StatusBadRequest, "invalid request body: "+err.Error())
		return
	}
	jr, err := g.judge0Job(r, s, b64)
	if err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, map[string][]string{"error": {err.Error()}})
		return
	}
	tenant, err := submitTenant(r)
	if err != nil {
		judge0Fail(w, tenantStatus(err), err.Error())
		return
	}
	setJobID(r, jr.ID)
	release, err := g.submit(r, g.jobSubmission("judge0", tenant, jr, wait))
	if err != nil {
		e := asSubmitError(err)
		e.setRetryAfter(w)
		judge0Fail(w, e.status, e.Error())
		return
	}
	defer release()
	if !wait {
		writeJSON(w, http.StatusCreated, struct {
			Token string `json:"token"`
		}{jr.ID})
		return
	}
	st, stdout, stderr, status, err := g.collect(r, g.as(tenant), jr.ID, g.o.MaxWait)
	if err != nil {
		judge0Fail(w, status, err.Error())
		return
	}
	writeJSON(w, http.StatusCreated, judge0Of(jr.ID, st, stdout, stderr, b64))
}

// judge0Get answers GET /submissions/{token}: the result once the job settled, else its status
// Processing (judge0's clients poll until the status id passes 2).
func (g *Gateway) judge0Get(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !job.ValidID(id) {
		judge0Fail(w, http.StatusNotFound, "Not found")
		return
	}
	c, ok := g.jobClient(w, r, id)
	if !ok {
		return
	}
	st, stdout, stderr, status, err := g.collect(r, c, id, AnnounceWait)
	switch {
	case errors.Is(err, runfleet.ErrNoSettlement):
		writeJSON(w, http.StatusOK, judge0Result{Token: id, Status: judge0Status{2, "Processing"}})
		return
	case err != nil:
		judge0Fail(w, status, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, judge0Of(id, st, stdout, stderr, r.URL.Query().Get("base64_encoded") == "true"))
}

// judge0Batch answers POST /submissions/batch: each submission stored, not waited for, and its
// token or its error in order.
func (g *Gateway) judge0Batch(w http.ResponseWriter, r *http.Request) {
	b64 := r.URL.Query().Get("base64_encoded") == "true"
	body, err := g.readBody(w, r)
	if err != nil {
		judge0Fail(w, http.StatusBadRequest, err.Error())
		return
	}
	var batch struct {
		Submissions []judge0Submission `json:"submissions"`
	}
	if err := json.Unmarshal(body, &batch); err != nil || len(batch.Submissions) == 0 {
		judge0Fail(w, http.StatusBadRequest, "want {\"submissions\": [...]}")
		return
	}
	tenant, err := submitTenant(r)
	if err != nil {
		judge0Fail(w, tenantStatus(err), err.Error())
		return
	}
	out := make([]any, len(batch.Submissions))
	for i, s := range batch.Submissions {
		jr, err := g.judge0Job(r, s, b64)
		if err == nil {
			_, err = g.submit(r, g.jobSubmission("judge0", tenant, jr, false))
		}
		if err != nil {
			out[i] = map[string][]string{"error": {err.Error()}}
			continue
		}
		out[i] = struct {
			Token string `json:"token"`
		}{jr.ID}
	}
	writeJSON(w, http.StatusCreated, out)
}

// judge0Signals are the runtime errors judge0 names by their signal.
var judge0Signals = map[string]judge0Status{
	"SIGSEGV": {7, "Runtime Error (SIGSEGV)"},
	"SIGXFSZ": {8, "Runtime Error (SIGXFSZ)"},
	"SIGFPE":  {9, "Runtime Error (SIGFPE)"},
	"SIGABRT": {10, "Runtime Error (SIGABRT)"},
}

// judge0Of is st as judge0 tells a submission's end.
func judge0Of(token string, st job.Settlement, stdout, stderr string, b64 bool) judge0Result {
	text := func(s string) *string {
		if b64 {
			s = base64.StdEncoding.EncodeToString([]byte(s))
		}
		return &s
	}
	res := judge0Result{Token: token, Stdout: text(stdout), Stderr: text(stderr), ExitCode: st.ExitCode}
	switch {
	case st.Status == job.StatusSucceeded:
		res.Status = judge0Status{3, "Accepted"}
		if want, ok := st.Labels[labelExpected]; ok {
			sum := sha256.Sum256([]byte(strings.TrimRight(stdout, "\n")))
			if hex.EncodeToString(sum[:]) != want {
				res.Status = judge0Status{4, "Wrong Answer"}
			}
		}
	case st.Status == job.StatusTimedOut:
		res.Status = judge0Status{5, "Time Limit Exceeded"}
	case st.Reason == job.ReasonCompileError:
		res.Status = judge0Status{6, "Compilation Error"}
		res.CompileOutput, res.Stderr, res.Stdout = text(stderr), nil, nil
	case st.Reason == job.ReasonSignal:
		res.Status = judge0Status{12, "Runtime Error (Other)"}
		if s, ok := judge0Signals[st.Signal]; ok {
			res.Status = s
		}
		if n := unixSignal(st.Signal); n > 0 {
			res.ExitSignal = &n
		}
	case st.Reason == job.ReasonExitNonzero:
		res.Status = judge0Status{11, "Runtime Error (NZEC)"}
	case st.Status == job.StatusFailed:
		res.Status = judge0Status{12, "Runtime Error (Other)"}
		res.Message = text(string(st.Reason))
	default:
		res.Status = judge0Status{13, "Internal Error"}
		res.Message = text(string(st.Status) + "/" + string(st.Reason))
	}
	if u := st.Usage; u != nil {
		ms := u.WallMS
		if u.CPUMS != nil {
			ms = *u.CPUMS
		}
		t := strconv.FormatFloat(float64(ms)/1000, 'f', 3, 64)
		res.Time = &t
		if u.MaxRSSBytes != nil {
			kb := *u.MaxRSSBytes >> 10
			res.Memory = &kb
		}
	}
	return res
}

// unixSignal is the number of a signal named as a settlement names it (SIGKILL), or 0.
func unixSignal(name string) int {
	for n, s := range []string{1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT", 7: "SIGBUS",
		8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM",
		24: "SIGXCPU", 25: "SIGXFSZ"} {
		if s == name && s != "" {
			return n
		}
	}
	return 0
}
