package runfleet

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Direct gets are answered by any server holding a stream (allow_direct) without the JetStream
// API's shared request queue, and hold nothing on the server. nats.go v1.56 has no batched form,
// so both forms are spoken here, as nats-server 2.11+ defines them (its stream code,
// getDirectRequest).

// Headers of a direct get's answer and of a stream's republish.
const (
	headerSequence     = "Nats-Sequence"
	headerLastSequence = "Nats-Last-Sequence" // republish: the subject's previous sequence, 0 for its first
	headerTimeStamp    = "Nats-Time-Stamp"
	headerSubject      = "Nats-Subject"
	headerNumPending   = "Nats-Num-Pending"
)

// errNoMessage is a direct get that found nothing.
var errNoMessage = errors.New("no message")

// storedMsg is one message of a stream as a direct get returns it.
type storedMsg struct {
	Subject  string
	Sequence uint64
	Time     time.Time
	Header   nats.Header
	Data     []byte
}

// directRequest is the body of $JS.API.DIRECT.GET.<stream>.
type directRequest struct {
	Seq     uint64 `json:"seq,omitempty"`
	LastFor string `json:"last_by_subj,omitempty"`
	NextFor string `json:"next_by_subj,omitempty"`
	Batch   int    `json:"batch,omitempty"`
}

// apiPrefix is the JetStream API prefix js sends its requests to.
func apiPrefix(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	}
	return jetstream.DefaultAPIPrefix
}

func (c *Client) directSubject(stream string) string {
	return apiPrefix(c.js) + "DIRECT.GET." + stream
}

// lastMsg returns the last message stored on subject, which may hold wildcards: then the
// server walks the distinct subjects they match, never the messages. It returns errNoMessage
// when there is none.
func (c *Client) lastMsg(ctx context.Context, stream, subject string) (storedMsg, error) {
	body, _ := json.Marshal(directRequest{LastFor: subject})
	rctx, cancel := context.WithTimeout(ctx, c.requestTimeout())
	defer cancel()
	m, err := c.js.Conn().RequestWithContext(rctx, c.directSubject(stream), body)
	if err != nil {
		return storedMsg{}, withCtx(ctx, fmt.Errorf("direct get %s: %w", subject, err))
	}
	return parseDirect(m)
}

// parseDirect reads one answer of a direct get.
func parseDirect(m *nats.Msg) (storedMsg, error) {
	switch status := m.Header.Get("Status"); status {
	case "":
	case "404":
		return storedMsg{}, errNoMessage
	default:
		return storedMsg{}, fmt.Errorf("direct get: status %s %s", status, m.Header.Get("Description"))
	}
	seq, err := strconv.ParseUint(m.Header.Get(headerSequence), 10, 64)
	if err != nil {
		return storedMsg{}, fmt.Errorf("direct get: sequence %q: %w", m.Header.Get(headerSequence), err)
	}
	ts, _ := time.Parse(time.RFC3339Nano, m.Header.Get(headerTimeStamp))
	return storedMsg{Subject: m.Header.Get(headerSubject), Sequence: seq, Time: ts, Header: m.Header, Data: m.Data}, nil
}

// directBatch is how many messages one batched direct get asks for.
const directBatch = 256

// scan calls each for every message stored on subject (wildcards allowed) from sequence from
// on, in order, and returns the last sequence it saw (from-1 when none). Each request asks for a
// batch and the answer ends with a 204 end-of-batch status, which says how many are left.
func (c *Client) scan(ctx context.Context, stream, subject string, from uint64, each func(storedMsg) error) (uint64, error) {
	nc := c.js.Conn()
	last := from - 1
	// One answer is at most a batch and its end-of-batch status: the channel never drops.
	msgs := make(chan *nats.Msg, directBatch+1)
	sub, err := nc.ChanSubscribe(nc.NewRespInbox(), msgs)
	if err != nil {
		return last, fmt.Errorf("direct get %s: %w", subject, err)
	}
	defer sub.Unsubscribe()
	for {
		pending, err := c.scanBatch(ctx, sub.Subject, msgs, stream, subject, last+1, &last, each)
		if err != nil || pending == 0 {
			return last, err
		}
	}
}

// scanBatch makes one batched request answered to inbox and returns how many messages the
// server says are left after it.
func (c *Client) scanBatch(ctx context.Context, inbox string, msgs <-chan *nats.Msg, stream, subject string, from uint64, last *uint64, each func(storedMsg) error) (uint64, error) {
	body, _ := json.Marshal(directRequest{Seq: from, NextFor: subject, Batch: directBatch})
	if err := c.js.Conn().PublishRequest(c.directSubject(stream), inbox, body); err != nil {
		return 0, fmt.Errorf("direct get %s: %w", subject, err)
	}
	timeout := time.NewTimer(c.requestTimeout())
	defer timeout.Stop()
	for {
		var m *nats.Msg
		select {
		case <-ctx.Done():
			return 0, withCtx(ctx, fmt.Errorf("direct get %s: %w", subject, ctx.Err()))
		case <-timeout.C:
			return 0, fmt.Errorf("direct get %s: %w", subject, nats.ErrTimeout)
		case m = <-msgs:
		}
		switch m.Header.Get("Status") {
		case "204": // end of batch
			n, _ := strconv.ParseUint(m.Header.Get(headerNumPending), 10, 64)
			return n, nil
		case "404":
			return 0, nil
		}
		sm, err := parseDirect(m)
		if err != nil {
			return 0, err
		}
		*last = sm.Sequence
		if err := each(sm); err != nil {
			return 0, err
		}
	}
}

// requestTimeout bounds a wait for the server when ctx has no deadline, as the JetStream API's
// own requests are bounded.
func (c *Client) requestTimeout() time.Duration {
	return cmp.Or(c.js.Options().DefaultTimeout, 5*time.Second)
}
