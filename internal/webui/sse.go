package webui

import (
	"fmt"
	"net/http"
	"strings"
)

// sse writes server-sent events, flushing each.
type sse struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func startSSE(w http.ResponseWriter) (sse, bool) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := sse{w, http.NewResponseController(w)}
	return s, s.rc.Flush() == nil
}

// send writes one event; data may hold newlines. It reports whether the client still listens.
func (s sse) send(event, data string) bool {
	var b strings.Builder
	fmt.Fprintf(&b, "event: %s\n", event)
	for line := range strings.SplitSeq(data, "\n") {
		fmt.Fprintf(&b, "data: %s\n", strings.ReplaceAll(line, "\r", ""))
	}
	b.WriteString("\n")
	if _, err := s.w.Write([]byte(b.String())); err != nil {
		return false
	}
	return s.rc.Flush() == nil
}

func (s sse) comment() bool {
	if _, err := s.w.Write([]byte(": keepalive\n\n")); err != nil {
		return false
	}
	return s.rc.Flush() == nil
}
