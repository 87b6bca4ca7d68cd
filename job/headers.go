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

// Output streams named in [HeaderStream].
const (
	Stdout = "stdout"
	Stderr = "stderr"
)

// MetadataPageTTL is the key of the results stream's metadata that says how long an output page
// is kept (a Go duration): workers publish each page with that per-message TTL, while the
// settlement lives for the stream's MaxAge, the job's record.
const MetadataPageTTL = "runfleet_page_ttl"
