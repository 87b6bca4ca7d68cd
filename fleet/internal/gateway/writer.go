package gateway

import (
	"errors"
	"net/http"
	"sync"
	"time"
)

// Defaults of [Options] that bound what a client may hold.
const (
	DefaultBodyTimeout  = 30 * time.Second
	DefaultWriteTimeout = 30 * time.Second
)

// errWritesEnded is a write after the handler's time ran out (see endWrites).
var errWritesEnded = errors.New("response ended")

// statusWriter records the status code and gives each write its own deadline, so that a client
// that stops reading holds a request for one write timeout at most, however long the request
// streams. Unwrap lets http.ResponseController reach Flush and the deadlines.
type statusWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	code    int
	wrote   bool

	mu    sync.Mutex
	ended bool
}

func newStatusWriter(w http.ResponseWriter, timeout time.Duration) *statusWriter {
	return &statusWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: timeout, code: http.StatusOK}
}

// arm sets the deadline of the next write, unless the writes ended.
func (s *statusWriter) arm() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return errWritesEnded
	}
	// A writer that cannot take deadlines (a test recorder) writes without them.
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	return nil
}

func (s *statusWriter) WriteHeader(code int) {
	if !s.wrote {
		s.code, s.wrote = code, true
	}
	if s.arm() == nil {
		s.ResponseWriter.WriteHeader(code)
	}
}

func (s *statusWriter) Write(b []byte) (int, error) {
	s.wrote = true
	if err := s.arm(); err != nil {
		return 0, err
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// end fails the write under way, if any, and every later one: a stream whose time ran out lets
// its client go even while a write to it is blocked.
func (s *statusWriter) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	_ = s.rc.SetWriteDeadline(time.Now())
}

// endWrites ends the writes of w, the writer instrument gave the handler (or one wrapping it).
func endWrites(w http.ResponseWriter) {
	for w != nil {
		if s, ok := w.(*statusWriter); ok {
			s.end()
			return
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return
		}
		w = u.Unwrap()
	}
}
