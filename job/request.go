package job

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"
	"unicode/utf8"
)

// Request is the body of a job message: what to run and within which bounds.
type Request struct {
	ID       string            `json:"id,omitempty"`
	Language string            `json:"language"`
	Code     string            `json:"code"`
	Preload  string            `json:"preload,omitempty"`
	Args     []string          `json:"args,omitempty"` // the program's arguments: sys.argv[1:], process.argv.slice(2)
	Stdin    string            `json:"stdin,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	Files    []File            `json:"files,omitempty"`
	Limits   Limits            `json:"limits,omitzero"`
	Outputs  []string          `json:"outputs,omitempty"` // globs under /workspace kept as artifacts
	Deadline time.Time         `json:"deadline,omitzero"`
	Labels   map[string]string `json:"labels,omitempty"`
	// RedriveOf names the job this one runs again (docs/protocol.md "Redrive"); its settlement
	// carries it too.
	RedriveOf string `json:"redrive_of,omitempty"`
}

// File is written under the sandbox's /workspace before the code runs.
type File struct {
	Path    string `json:"path"`
	Content []byte `json:"content"`
	Mode    uint32 `json:"mode,omitempty"`
}

// Bounds are limits with every field resolved.
type Bounds struct {
	Timeout     time.Duration
	OutputBytes int64
	PageBytes   int64
	MaxPages    int64
	MemoryBytes int64
	Pids        int64
	// ArtifactBytes and ArtifactFiles bound what is kept of the job's outputs.
	ArtifactBytes int64
	ArtifactFiles int64
}

// Policy is what a worker accepts: defaults for missing limits, minima, maxima, and sizes of the
// request.
type Policy struct {
	Default      Bounds
	Min          Bounds            // a zero field means 1
	Max          Bounds            // a zero field means no maximum
	MaxBodyBytes int               // the whole message body
	MaxFiles     int               // entries in files
	MaxEnv       int               // entries in env
	Languages    func(string) bool // reports whether a language names a profile
}

// DefaultPolicy is the policy a worker runs with unless configured otherwise.
func DefaultPolicy() Policy {
	return Policy{
		Default: Bounds{Timeout: 10 * time.Second, OutputBytes: 1 << 20, PageBytes: 64 << 10,
			MaxPages: 64, MemoryBytes: 256 << 20, Pids: 64, ArtifactBytes: 16 << 20, ArtifactFiles: 32},
		// A sandbox's runtime and interpreter need this much to start at all.
		Min: Bounds{MemoryBytes: 16 << 20, Pids: 8},
		Max: Bounds{Timeout: 5 * time.Minute, OutputBytes: 16 << 20, PageBytes: 256 << 10,
			MaxPages: 4096, MemoryBytes: 2 << 30, Pids: 512, ArtifactBytes: 256 << 20, ArtifactFiles: 256},
		MaxBodyBytes: 1000 * 1000, // under NATS's default max_payload of 1 MiB, headers included
		MaxFiles:     256,
		MaxEnv:       128,
	}
}

// ProtocolPolicy is what the protocol itself fixes — the body size, the shape of every field, the
// sign of every limit — without a worker's configuration: any language, no maxima. A publisher
// checks a request against it before sending, so that what it can know is wrong fails at once; a
// worker's own policy may still reject the job, and then it settles rejected.
func ProtocolPolicy() Policy {
	p := DefaultPolicy()
	p.Max = Bounds{}
	return p
}

// RejectError says why a request is invalid; Reason is the code a rejected settlement carries.
// JobID is set when the error comes from a settlement ([Settlement.Err]); a publisher's own
// validation leaves it empty, and the client names the job around it.
type RejectError struct {
	JobID  string
	Reason Reason
	Detail string
}

func (e *RejectError) Error() string {
	msg := "rejected: " + string(e.Reason)
	if e.JobID != "" {
		msg = "job " + e.JobID + " rejected: " + string(e.Reason)
	}
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

func reject(r Reason, format string, args ...any) *RejectError {
	return &RejectError{Reason: r, Detail: fmt.Sprintf(format, args...)}
}

var (
	envName   = namePattern{re: `^[A-Za-z_][A-Za-z0-9_]*$`, first: classOf("A-Za-z_"), rest: classOf("A-Za-z0-9_")}
	labelName = namePattern{re: `^[a-z0-9_.-]{1,63}$`, first: classOf("a-z0-9_.-"), rest: classOf("a-z0-9_.-"), max: 63}
)

// MaxArgs bounds a request's args; the body's size bounds their bytes.
const MaxArgs = 1024

// Bounds of labels, which every settlement of the job carries.
const (
	MaxLabels          = 16
	MaxLabelValueBytes = 256
)

// maxDepth bounds nesting in a request body; a valid request needs 4.
const maxDepth = 16

// Decode parses and validates a job message body against p. id is the job id of the message's
// subject, which a body's own id must equal (id_mismatch). A Nats-Msg-Id header, which version-3
// publishers never send, is checked by the caller: when present it must equal id too. The
// error, when not nil, is a *RejectError.
//
// Deprecated: internal to the fleet; will move in the next release.
func Decode(body []byte, id string, p Policy) (Request, Bounds, error) {
	var req Request
	if !ValidID(id) {
		return req, Bounds{}, reject(ReasonInvalidID, "job id %q does not match %s", clip(id), idPattern)
	}
	if p.MaxBodyBytes > 0 && len(body) > p.MaxBodyBytes {
		return req, Bounds{}, reject(ReasonPayloadTooLarge, "body is %d bytes, at most %d", len(body), p.MaxBodyBytes)
	}
	if !utf8.Valid(body) {
		return req, Bounds{}, reject(ReasonInvalidJSON, "body is not UTF-8")
	}
	if err := checkShape(body); err != nil {
		return req, Bounds{}, err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&req); err != nil {
		return req, Bounds{}, decodeError(err)
	}
	if req.ID != "" && req.ID != id {
		return req, Bounds{}, reject(ReasonIDMismatch, "id %q differs from the subject's job id %q", clip(req.ID), id)
	}
	req.ID = id
	b, err := req.Validate(p)
	return req, b, err
}

// Validate checks the fields of r against p and resolves its limits.
func (r *Request) Validate(p Policy) (Bounds, error) {
	switch {
	case r.Language == "":
		return Bounds{}, reject(ReasonMissingLanguage, "language is required")
	case p.Languages != nil && !p.Languages(r.Language):
		return Bounds{}, reject(ReasonUnknownLanguage, "no profile %q on this worker", clip(r.Language))
	case r.Code == "":
		return Bounds{}, reject(ReasonMissingCode, "code is required")
	case strings.ContainsRune(r.Code, 0):
		return Bounds{}, reject(ReasonInvalidCode, "code contains NUL")
	case strings.ContainsRune(r.Preload, 0):
		return Bounds{}, reject(ReasonInvalidPreload, "preload contains NUL")
	case len(r.Args) > MaxArgs:
		return Bounds{}, reject(ReasonInvalidArgs, "%d arguments, at most %d", len(r.Args), MaxArgs)
	}
	for i, a := range r.Args {
		if strings.ContainsRune(a, 0) {
			return Bounds{}, reject(ReasonInvalidArgs, "argument %d contains NUL", i)
		}
	}
	if p.MaxEnv > 0 && len(r.Env) > p.MaxEnv {
		return Bounds{}, reject(ReasonInvalidEnv, "%d variables, at most %d", len(r.Env), p.MaxEnv)
	}
	for k, v := range r.Env {
		if !envName.MatchString(k) {
			return Bounds{}, reject(ReasonInvalidEnv, "name %q does not match %s", clip(k), envName)
		}
		if strings.ContainsRune(v, 0) {
			return Bounds{}, reject(ReasonInvalidEnv, "value of %s contains NUL", k)
		}
	}
	if r.RedriveOf != "" && !ValidID(r.RedriveOf) {
		return Bounds{}, reject(ReasonInvalidID, "redrive_of %q: %v", clip(r.RedriveOf), ErrInvalidID)
	}
	if len(r.Labels) > MaxLabels {
		return Bounds{}, reject(ReasonInvalidLabels, "%d labels, at most %d", len(r.Labels), MaxLabels)
	}
	for k, v := range r.Labels {
		if !labelName.MatchString(k) {
			return Bounds{}, reject(ReasonInvalidLabels, "name %q does not match %s", clip(k), labelName)
		}
		if len(v) > MaxLabelValueBytes {
			return Bounds{}, reject(ReasonInvalidLabels, "value of %s is %d bytes, at most %d", k, len(v), MaxLabelValueBytes)
		}
	}
	if p.MaxFiles > 0 && len(r.Files) > p.MaxFiles {
		return Bounds{}, reject(ReasonInvalidFiles, "%d files, at most %d", len(r.Files), p.MaxFiles)
	}
	seen := make(map[string]bool, len(r.Files))
	for _, f := range r.Files {
		if err := checkPath(f.Path); err != nil {
			return Bounds{}, err
		}
		if seen[path.Clean(f.Path)] {
			return Bounds{}, reject(ReasonInvalidPath, "%q given twice", clip(f.Path))
		}
		seen[path.Clean(f.Path)] = true
		if f.Mode&^0o777 != 0 {
			return Bounds{}, reject(ReasonInvalidFiles, "mode %o of %q: only permission bits", f.Mode, clip(f.Path))
		}
	}
	if err := checkOutputs(r.Outputs); err != nil {
		return Bounds{}, err
	}
	return r.Limits.resolve(p)
}

func checkPath(p string) error {
	if err := checkRelative(ReasonInvalidPath, "path", p); err != nil {
		return err
	}
	if c := path.Clean(p); c == "." {
		return reject(ReasonInvalidPath, "%q names no file", clip(p))
	}
	return nil
}

// checkRelative refuses, with reason, a path or pattern p that is not a relative one inside
// /workspace: empty, with NUL, absolute, too long, or with a ".." element.
func checkRelative(reason Reason, what, p string) error {
	switch {
	case p == "":
		return reject(reason, "empty %s", what)
	case strings.ContainsRune(p, 0):
		return reject(reason, "%s contains NUL", what)
	case strings.HasPrefix(p, "/") || strings.HasPrefix(p, `\`):
		return reject(reason, "%q is absolute", clip(p))
	case len(p) > 1024:
		return reject(reason, "%s longer than 1024 bytes", what)
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return reject(reason, "%q leaves /workspace", clip(p))
		}
	}
	return nil
}

// checkShape refuses what encoding/json would accept quietly: duplicate keys, deep nesting, and
// a body that is not one JSON object.
func checkShape(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return reject(ReasonInvalidJSON, "%v", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return reject(ReasonInvalidJSON, "body is not a JSON object")
	}
	type frame struct {
		object bool
		keys   map[string]bool
		key    bool // in an object: the next string token is a key
	}
	stack := []frame{{object: true, keys: map[string]bool{}, key: true}}
	for len(stack) > 0 {
		tok, err := dec.Token()
		if err != nil {
			return reject(ReasonInvalidJSON, "%v", err)
		}
		top := &stack[len(stack)-1]
		if top.object && top.key {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				if len(stack) > 0 {
					stack[len(stack)-1].key = true
				}
				continue
			}
			k := tok.(string)
			if top.keys[k] {
				return reject(ReasonDuplicateKey, "key %q appears twice", clip(k))
			}
			top.keys[k] = true
			top.key = false
			continue
		}
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{', '[':
				if len(stack) >= maxDepth {
					return reject(ReasonTooDeep, "nested deeper than %d", maxDepth)
				}
				stack = append(stack, frame{object: d == '{', keys: map[string]bool{}, key: d == '{'})
				continue
			case ']':
				stack = stack[:len(stack)-1]
			}
		}
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].key = true
		}
	}
	if _, err := dec.Token(); err != io.EOF {
		return reject(ReasonInvalidJSON, "data after the JSON object")
	}
	return nil
}

func decodeError(err error) error {
	var re *RejectError
	if errors.As(err, &re) {
		return re
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		reason := Reason("invalid_" + strings.SplitN(field, ".", 2)[0])
		switch {
		case strings.HasPrefix(field, "limits"):
			reason = ReasonInvalidLimits
		case strings.HasPrefix(field, "files"):
			reason = ReasonInvalidFiles
		case strings.HasPrefix(field, "outputs"):
			reason = ReasonInvalidOutputs
		case field == "":
			reason = ReasonInvalidJSON
		}
		return reject(reason, "%s: want %s, got %s", field, te.Type, te.Value)
	}
	var pe *time.ParseError
	if errors.As(err, &pe) {
		return reject(ReasonInvalidDeadline, "deadline is not an RFC 3339 time")
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "base64"):
		return reject(ReasonInvalidFiles, "file content is not base64")
	case strings.Contains(msg, "Time.UnmarshalJSON"), strings.Contains(msg, "parsing time"):
		return reject(ReasonInvalidDeadline, "deadline is not an RFC 3339 time")
	}
	return reject(ReasonInvalidJSON, "%v", err)
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
