// Package sse writes server-sent events (an HTML event stream), flushing each: the gateway's job
// events and the web view's live pages both write through it.
package sse

import (
	"net/http"
	"strings"
	"sync"
)

// Writer writes the events of one response. It is safe for concurrent use, so that a keep-alive
// may write between the events.
type Writer struct {
	mu sync.Mutex
	w  http.ResponseWriter
	rc *http.ResponseController
}

// Start answers 200 with the headers of an event stream that proxies do not cache or buffer, and
// flushes them. An error means the response cannot stream.
func Start(w http.ResponseWriter) (*Writer, error) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	s := &Writer{w: w, rc: http.NewResponseController(w)}
	return s, s.rc.Flush()
}

// Event is one event. Data may hold newlines: each line goes on a data line of its own, and a
// carriage return, which would end a line too, is dropped.
type Event struct {
	// ID, when set, is what a client that reconnects sends back in Last-Event-ID.
	ID   string
	Name string // the event's type; empty is "message"
	Data string
}

// Send writes e and flushes it.
func (s *Writer) Send(e Event) error {
	var b strings.Builder
	if e.ID != "" {
		b.WriteString("id: " + e.ID + "\n")
	}
	if e.Name != "" {
		b.WriteString("event: " + e.Name + "\n")
	}
	for line := range strings.SplitSeq(e.Data, "\n") {
		b.WriteString("data: " + strings.ReplaceAll(line, "\r", "") + "\n")
	}
	b.WriteString("\n")
	return s.write(b.String())
}

// Comment writes a comment, which clients ignore: a keep-alive for proxies that close idle
// streams, or a note for people reading the stream.
func (s *Writer) Comment(text string) error {
	return s.write(": " + text + "\n\n")
}

func (s *Writer) write(b string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.w.Write([]byte(b)); err != nil {
		return err
	}
	return s.rc.Flush()
}
