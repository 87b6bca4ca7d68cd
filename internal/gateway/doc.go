// Package gateway serves runfleet's HTTP API (docs/protocol.md "HTTP gateway"): the native routes
// under /v1/jobs, server-sent events of a job's pages, and dify-sandbox's routes under
// /v1/sandbox, so that services that do not speak NATS can use a fleet.
//
// Invariants:
//
//   - Stateless. A gateway publishes and watches exactly as the runfleet client does, over the
//     fleet's subjects; it keeps no job state, so any number of gateways serve the same fleet and a
//     request may go to any of them (an event stream resumes anywhere with Last-Event-ID, which is
//     the results stream's sequence of the last page seen).
//   - A job is stored once before any answer says so: 202 {"job_id"} follows JetStream's ack.
//   - A waiting request (?wait=true, /v1/sandbox/run, events) holds nothing but its own watch: a
//     client that goes away ends the watch; it cancels the job on /v1/sandbox/run (whose answer
//     nobody else can read) and, on ?wait=true, only when asked (?cancel_on_disconnect=true or
//     Options.CancelOnDisconnect). A wait is bounded by Options.MaxWait, an event stream too;
//     past it the job goes on and the answer is its id (504 on /v1/sandbox/run).
//   - Admission before storing: a waiting request takes one of Options.MaxWaiting places before
//     its job is published, so that a request the gateway could not follow is refused with
//     nothing stored. 503 (with Retry-After) always means nothing was stored and retrying is
//     safe; a stored job is never answered 503.
//   - No client holds a request by being slow: its body must arrive within BodyTimeout, each
//     write of an answer must finish within WriteTimeout.
//   - Every route but /healthz, /readyz and /health needs the API key, compared in constant time.
//     /health is dify-sandbox's public probe; the two others are the orchestrator's.
//   - Tenants (tenants.go): a key listed in a tenant's policy acts for that tenant and reaches its
//     jobs only; another tenant's job is answered as an unknown one. The operator's key acts for
//     default, names any tenant with ?tenant=, and reaches every job. A submit past its tenant's
//     max_queued is 429 with nothing stored, counted from one snapshot of the tenant consumers
//     shared by every request and read at most every 250 ms.
//   - The gateway validates a native request as the protocol does, with no ranges of its own: a
//     limit is checked for shape and sign here, and against the fleet's maxima by the worker, which
//     settles it rejected. enable_network is accepted and never grants a network (G6).
package gateway
