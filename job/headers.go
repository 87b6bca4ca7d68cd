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
