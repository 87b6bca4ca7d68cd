package job

// Headers of the messages a job produces.
const (
	HeaderMsgID       = "Nats-Msg-Id"
	HeaderTraceparent = "traceparent"
	HeaderJobID       = "Runfleet-Job-Id"
	HeaderStream      = "Runfleet-Stream"
	HeaderPage        = "Runfleet-Page"
	HeaderOffset      = "Runfleet-Offset"
	HeaderAttempt     = "Runfleet-Attempt"
)

// ReservedHeaders are the headers NATS and JetStream give meaning to on a message they deliver: a
// status (Status, Description) or a consumer's heartbeat and flow control. A client that reads a
// message carrying one as a status drops or misroutes it, so a job message that carries one is
// rejected with [ReasonReservedHeader] before anything else is read of it.
var ReservedHeaders = []string{
	"Status", "Description",
	"Nats-Last-Consumer", "Nats-Last-Stream", "Nats-Pending-Messages", "Nats-Pending-Bytes", "Nats-Consumer-Stalled",
}

// ReservedHeader is the first of [ReservedHeaders] h holds, or "".
//
// Deprecated: internal to the fleet; will move in the next release.
func ReservedHeader(h map[string][]string) string {
	for _, name := range ReservedHeaders {
		if _, ok := h[name]; ok {
			return name
		}
	}
	return ""
}

// Output streams named in [HeaderStream].
const (
	Stdout = "stdout"
	Stderr = "stderr"
)

// MetadataPageTTL is the key of the results stream's metadata that says how long an output page
// is kept (a Go duration): workers publish each page with that per-message TTL, while the
// settlement lives for the stream's MaxAge, the job's record.
const MetadataPageTTL = "runfleet_page_ttl"
