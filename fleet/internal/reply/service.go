// Package reply answers the fleet's NATS request/reply services — the job index and the
// redrives — through nats.go's micro: one endpoint per subject, in a queue group that every
// worker serving the service joins, so that one of them answers each request. An error is
// answered with the headers of package protocol (Nats-Service-Error, Nats-Service-Error-Code and
// Runfleet-Reason), a success with the endpoint's JSON; the wire is docs/protocol.md's.
//
// micro also answers its discovery subjects ($SRV.PING, $SRV.INFO and $SRV.STATS, by name), so
// `nats micro ls` lists the workers that serve each service and counts their requests and errors.
package reply

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// version is what micro's discovery reports of every service: their wire is docs/protocol.md's,
// which does not change under a running fleet.
const version = "1.0.0"

// Answer answers one request's body with a value marshalled to JSON, or an error that
// Config.Classify turns into the error answered.
type Answer func(ctx context.Context, body []byte) (any, error)

// JSON returns an Answer that decodes the body into an In and answers what do returns. A body
// it cannot decode is a [job.ErrInvalidQuery].
func JSON[In, Out any](do func(context.Context, In) (Out, error)) Answer {
	return func(ctx context.Context, body []byte) (any, error) {
		var in In
		if err := json.Unmarshal(body, &in); err != nil {
			return nil, fmt.Errorf("%w: %w", job.ErrInvalidQuery, err)
		}
		return do(ctx, in)
	}
}

// Endpoint answers the requests on one subject.
type Endpoint struct {
	Name    string // for micro's discovery: letters, digits, - and _
	Subject string
	Answer  Answer
}

// Config describes a service.
type Config struct {
	// Name names the service in micro's discovery; letters, digits, - and _.
	Name string
	// QueueGroup is the group every endpoint subscribes in: the workers that serve the service
	// share it, and one answers each request. Workers of every version must agree on it.
	QueueGroup string
	Endpoints  []Endpoint
	// Timeout bounds one answer.
	Timeout time.Duration
	// Classify turns an error of an Answer into the error answered. An error it classifies as
	// 500 or above is logged, the answer's message being for the client.
	Classify func(error) *protocol.ServiceError
	Log      *slog.Logger
}

// Server is a started service.
type Server struct {
	svc micro.Service

	mu      sync.Mutex
	stopped bool
	answers sync.WaitGroup
}

// Start subscribes c's endpoints on nc and answers their requests, each under ctx, until Stop.
// Requests on one endpoint are answered one at a time, those on different endpoints
// concurrently.
func Start(ctx context.Context, nc *nats.Conn, c Config) (*Server, error) {
	svc, err := micro.AddService(nc, micro.Config{Name: c.Name, Version: version, QueueGroup: c.QueueGroup})
	if err != nil {
		return nil, fmt.Errorf("service %s: %w", c.Name, err)
	}
	s := &Server{svc: svc}
	for _, e := range c.Endpoints {
		h := func(req micro.Request) {
			if !s.begin() {
				return // Stop drains: a request delivered now goes unanswered, as it would on a worker gone
			}
			defer s.answers.Done()
			answer(ctx, c, e, req)
		}
		if err := svc.AddEndpoint(e.Name, micro.HandlerFunc(h), micro.WithEndpointSubject(e.Subject)); err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("service %s: subscribe %s: %w", c.Name, e.Subject, err)
		}
	}
	// Once Start returns, a request from any connection finds the service: the server holds its
	// subscriptions (bounded: a server too slow to answer does not hold the start).
	_ = nc.FlushTimeout(5 * time.Second)
	return s, nil
}

// begin counts an answer under way, unless the server stopped.
func (s *Server) begin() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return false
	}
	s.answers.Add(1)
	return true
}

// Stop unsubscribes the endpoints and waits for the answers under way.
func (s *Server) Stop() error {
	err := s.svc.Stop()
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	s.answers.Wait()
	return err
}

func answer(ctx context.Context, c Config, e Endpoint, req micro.Request) {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	out, err := e.Answer(ctx, req.Data())
	var b []byte
	if err == nil {
		b, err = json.Marshal(out)
	}
	if err != nil {
		se := c.Classify(err)
		if se.Code >= 500 {
			c.Log.Warn("answer a request", "service", c.Name, "subject", req.Subject(), "err", err)
		}
		err = req.Error(strconv.Itoa(se.Code), se.Message, nil, micro.WithHeaders(micro.Headers(se.Header())))
	} else {
		err = req.Respond(b)
	}
	if err != nil {
		c.Log.Warn("answer a request", "service", c.Name, "subject", req.Subject(), "err", err)
	}
}
