package protocol

import (
	"errors"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet/job"
)

// Headers of a fleet service's error answer: the two of the NATS services convention (what
// nats.go's micro writes with Request.Error) and the fleet's reason. An answer without
// ErrorHeader is the service's JSON.
const (
	ErrorHeader     = "Nats-Service-Error"      // the message, for people
	ErrorCodeHeader = "Nats-Service-Error-Code" // an HTTP status: 400, 404, 409 or 500
	ReasonHeader    = "Runfleet-Reason"         // one of the Reason codes; the redrive service's answers carry it
)

// Reasons, the short codes of docs/protocol.md a service answers in ReasonHeader and the gateway
// answers in an error body's "reason".
const (
	ReasonInvalidQuery  = "invalid_query"  // a filter, cursor, id or body the service cannot read (400)
	ReasonNotFound      = "not_found"      // the fleet holds no such job or run (404)
	ReasonNotSettled    = "not_settled"    // the job has not settled: nothing to redrive yet (409)
	ReasonNotRedrivable = "not_redrivable" // the job succeeded or was rejected (409)
	ReasonMayHaveRun    = "may_have_run"   // the job settled unknown and the caller did not confirm (409)
	ReasonUnavailable   = "unavailable"    // the service or its store cannot answer now: retry later
)

// Sentinels a [ServiceError] matches with errors.Is, by its reason; the client module's root
// package names the same values (runfleet.ErrNotFound is ErrNotFound).
var (
	ErrNotFound      = errors.New("job not found")
	ErrNoSettlement  = errors.New("job not settled")
	ErrNotRedrivable = errors.New("job not redrivable")
	ErrMayHaveRun    = errors.New("job may have run: confirm to redrive it")
)

// ServiceError is an error a fleet service answered with: Code is an HTTP status, Reason a short
// code (empty from the job index). It matches [job.ErrInvalidQuery] (any 400), [ErrNotFound]
// (not_found), [ErrNoSettlement] (not_settled), [ErrNotRedrivable] and [ErrMayHaveRun].
type ServiceError struct {
	Code    int
	Reason  string
	Message string
}

func (e *ServiceError) Error() string { return e.Message }

func (e *ServiceError) Is(target error) bool {
	if target == job.ErrInvalidQuery {
		return e.Code == 400
	}
	switch e.Reason {
	case ReasonNotFound:
		return target == ErrNotFound
	case ReasonNotSettled:
		return target == ErrNoSettlement
	case ReasonNotRedrivable:
		return target == ErrNotRedrivable
	case ReasonMayHaveRun:
		return target == ErrMayHaveRun
	}
	return false
}

// Header is e as the headers of an answer.
func (e *ServiceError) Header() nats.Header {
	h := nats.Header{}
	h.Set(ErrorHeader, e.Message)
	h.Set(ErrorCodeHeader, strconv.Itoa(e.Code))
	if e.Reason != "" {
		h.Set(ReasonHeader, e.Reason)
	}
	return h
}

// ErrorOf returns the error a service answered with in h, or nil when h is not an error's.
func ErrorOf(h nats.Header) *ServiceError {
	msg := h.Get(ErrorHeader)
	if msg == "" {
		return nil
	}
	code, _ := strconv.Atoi(h.Get(ErrorCodeHeader))
	return &ServiceError{Code: code, Reason: h.Get(ReasonHeader), Message: msg}
}
