// Package gateway serves runfleet's HTTP API (docs/protocol.md "HTTP gateway"): the native routes
// under /v1/jobs, server-sent events of a job's pages, and the routes of dify-sandbox (/v1/sandbox),
// piston (/api/v2) and judge0, so that services that do not speak NATS can use a fleet.
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
//   - Tenants (tenants.go): a job is its tenant and its id. A key listed in a tenant's policy acts
//     for that tenant: every route by id reaches that tenant's job of the id, found by subjects
//     that name the tenant, never by looking up whose an id is; another tenant's job of the same
//     id is never reached and is answered as an unknown one. The operator's key acts for default,
//     names any tenant with ?tenant=, and reaches every job (409 ambiguous_id when several
//     tenants hold an id it names without ?tenant=). A submit past its tenant's
//     max_queued is 429 with nothing stored, counted from one snapshot of the tenant consumers
//     shared by every request and read at most every 250 ms.
//   - Admission (bounds.go): a job on a queue not declared for its tenant is 404 unknown_queue
//     (a fleet without declarations declares default and the queues with a discovery consumer);
//     a tenant past a storage bound is 429 tenant_storage_full, from the workers' count of its
//     usage read at most once a second per tenant plus what this gateway stored since.
//   - One admission (admission.go, submit) for every route that stores a job: native, dify-sandbox,
//     piston and judge0 run the same checks in the same order and answer a refusal with the same
//     native reason, status and Retry-After, each in its own API's envelope.
//   - A refusal decided before the publish (an unknown queue, max_queued, a storage bound, a bad
//     name, a body too large) or by the
//     stream (jobs_stream_full) is answered as itself after one try; only a publish whose outcome
//     is unknown is retried, and only that one may end in 504 unconfirmed.
//   - Web sessions (ui.go) are signed with the random secret of the tenants bucket, never with
//     one derived from a key, and checked on every request against the keys and tenants the
//     bucket holds now and the identity's last logout.
//   - The gateway validates a native request as the protocol does, with no ranges of its own: a
//     limit is checked for shape and sign here, and against the fleet's maxima by the worker, which
//     settles it rejected. enable_network is accepted and never grants a network (G6).
package gateway
