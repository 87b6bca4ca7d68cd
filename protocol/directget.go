package protocol

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The JetStream API as the fleet's processes speak it without nats.go's help: direct gets, which
// any server holding a stream with allow_direct answers without the API's shared request queue
// and which hold nothing on the server, and raw pull and list requests. nats.go v1.56 has no
// batched direct get, so both forms are spoken here, as nats-server 2.11+ defines them (its
// stream code, getDirectRequest).

// APIPrefix is the JetStream API prefix js sends its requests to, ending in a dot:
// "$JS.<domain>.API." for a domain, else js's API prefix, else "$JS.API.".
//
// A domain wins over an API prefix. nats.go sets one or the other: [jetstream.NewWithDomain]
// sets Domain and sends to the domain's prefix, [jetstream.NewWithAPIPrefix] sets APIPrefix;
// only an option that sets APIPrefix under NewWithDomain makes both, and then nats.go still
// sends to the domain's prefix.
func APIPrefix(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	}
	return jetstream.DefaultAPIPrefix
}

// DirectGetSubject is the subject of a direct get of stream through js's API prefix.
func DirectGetSubject(js jetstream.JetStream, stream string) string {
	return APIPrefix(js) + "DIRECT.GET." + stream
}

// KVDirectGetSubject is the subject of a direct get of key's last value in bucket, the key in
// the subject (no body): a NATS user can be allowed some keys of a bucket and not others.
func KVDirectGetSubject(js jetstream.JetStream, bucket, key string) string {
	return DirectGetSubject(js, "KV_"+bucket) + ".$KV." + bucket + "." + key
}

// DirectGetRequest is the body of a direct get.
type DirectGetRequest struct {
	Seq     uint64 `json:"seq,omitempty"`
	LastFor string `json:"last_by_subj,omitempty"`
	NextFor string `json:"next_by_subj,omitempty"`
	Batch   int    `json:"batch,omitempty"`
}

// Headers of a direct get's answer and of a stream's republish.
const (
	HeaderSequence     = "Nats-Sequence"
	HeaderLastSequence = "Nats-Last-Sequence" // republish: the subject's previous sequence, 0 for its first
	HeaderTimeStamp    = "Nats-Time-Stamp"
	HeaderSubject      = "Nats-Subject"
	HeaderNumPending   = "Nats-Num-Pending" // of a batch's end (status 204): the messages left
)

// ErrNoMessage is a direct get that found nothing.
var ErrNoMessage = errors.New("no message")

// StoredMsg is one message of a stream as a direct get returns it.
type StoredMsg struct {
	Subject  string
	Sequence uint64
	Time     time.Time
	Header   nats.Header
	Data     []byte
}

// ParseDirectGet reads one answer of a direct get: [ErrNoMessage] for a 404, an error for any
// other status. A batch's end (status 204) is the caller's to recognise first.
func ParseDirectGet(m *nats.Msg) (StoredMsg, error) {
	switch status := m.Header.Get("Status"); status {
	case "":
	case "404":
		return StoredMsg{}, ErrNoMessage
	default:
		return StoredMsg{}, fmt.Errorf("direct get: status %s %s", status, m.Header.Get("Description"))
	}
	seq, err := strconv.ParseUint(m.Header.Get(HeaderSequence), 10, 64)
	if err != nil {
		return StoredMsg{}, fmt.Errorf("direct get: sequence %q: %w", m.Header.Get(HeaderSequence), err)
	}
	ts, _ := time.Parse(time.RFC3339Nano, m.Header.Get(HeaderTimeStamp))
	return StoredMsg{Subject: m.Header.Get(HeaderSubject), Sequence: seq, Time: ts, Header: m.Header, Data: m.Data}, nil
}
