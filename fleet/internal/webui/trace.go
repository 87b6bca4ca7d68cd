package webui

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet/job"
)

// TraceIDPlaceholder is what a trace URL template (Options.TraceURL) holds where a job's trace
// id goes.
const TraceIDPlaceholder = "{trace_id}"

// CheckTraceURL says whether template is a trace URL template the view can link with: an
// http(s) URL with a host, holding [TraceIDPlaceholder].
func CheckTraceURL(template string) error {
	if !strings.Contains(template, TraceIDPlaceholder) {
		return fmt.Errorf("%q: want %s where the trace id goes", template, TraceIDPlaceholder)
	}
	u, err := url.Parse(traceURL(template, strings.Repeat("0", 32)))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q: want http:// or https:// and a host", template)
	}
	return nil
}

// traceURL is template with id in place of every TraceIDPlaceholder, escaped for a path or a
// query alike; the template itself is the operator's, taken as written.
func traceURL(template, id string) string {
	return strings.ReplaceAll(template, TraceIDPlaceholder, url.QueryEscape(id))
}

// traceLink is what a job's page shows of its trace: the id, and the URL of the trace viewer's
// page of it when the view has a template.
type traceLink struct {
	ID, URL string
}

// traceOf is the trace of a job's stored request header; ok is false unless it carries exactly
// one valid traceparent. The header is the publisher's, so hostile: nothing of an invalid one is
// shown, and what is shown goes through the templates' escaping as every value does.
func traceOf(h nats.Header, template string) (l traceLink, ok bool) {
	values := h.Values(job.HeaderTraceparent)
	if len(values) != 1 {
		return traceLink{}, false
	}
	id, err := parseTraceparent(values[0])
	if err != nil {
		return traceLink{}, false
	}
	l.ID = id
	if template != "" {
		l.URL = traceURL(template, id)
	}
	return l, true
}

var errTraceparent = errors.New("not a W3C traceparent of version 00")

// parseTraceparent returns the trace id of a W3C traceparent of version 00, as the Trace Context
// recommendation reads it strictly: "00-" 32 lowercase hex digits of trace id, "-" 16 of parent
// id, "-" 2 of flags, and neither id all zeros. Later versions, which may add fields, are not
// read: the fleet writes version 00.
func parseTraceparent(s string) (traceID string, err error) {
	const size = 2 + 1 + 32 + 1 + 16 + 1 + 2
	if len(s) != size || s[:3] != "00-" || s[35] != '-' || s[52] != '-' {
		return "", errTraceparent
	}
	traceID, parent, flags := s[3:35], s[36:52], s[53:]
	for _, f := range []string{traceID, parent, flags} {
		if !lowerHex(f) {
			return "", errTraceparent
		}
	}
	if strings.Trim(traceID, "0") == "" || strings.Trim(parent, "0") == "" {
		return "", errTraceparent
	}
	return traceID, nil
}

func lowerHex(s string) bool {
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
