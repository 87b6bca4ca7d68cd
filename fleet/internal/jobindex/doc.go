// Package jobindex keeps the list of settled jobs (docs/protocol.md "Listing, inspecting and
// redriving") in Redis, and serves it to clients over NATS.
//
// Invariants:
//
//   - One sorted set per filter: status × queue × tenant, each either a value or every value
//     ("*"), eight sets in all, so that any filter of a list reads exactly one set. A job is in
//     the eight sets of its own status, queue and tenant; its score is its settle time in
//     milliseconds and its member the JSON of its list row ([job.Listed]). A page is one
//     ZRANGE BYSCORE REV with LIMIT: its cost grows with the page and the logarithm of the set,
//     never with the number of jobs kept.
//   - Every key (package keyspace names them) carries the hash tag {<prefix>:index} and no
//     other: on a Redis Cluster the index lives in one slot of its own, and nothing touches the
//     index and a job's lease keys in one script.
//   - A row is written after its settlement is stored, by the runner that stored or adopted it,
//     and never changes: the settlement is stored once, so adding it again (an adopting attempt,
//     a repair) adds the same member and changes nothing. A worker that dies between the two
//     leaves the row to the attempt that adopts the settlement.
//   - Rows older than the retention (the job record's) are trimmed as rows are added: everything
//     kept is listable, nothing is capped below the retention.
//   - A cursor is "<ms>.<n>": the settle time of the page's last row and how many rows of that
//     millisecond were listed, so that rows settled in one millisecond are neither skipped nor
//     repeated.
//   - Each tenant's storage usage (its kept requests' bytes and number, its artifacts' bytes) is
//     a hash of per-hour counters in the tenant's own slot, added to by the worker that stores a
//     settlement or artifacts, and read (with the counters past their time removed) in one HGETALL
//     of at most a few hundred fields: never a scan of the jobs. The workers that serve the index
//     answer it on protocol.UsageSubject, for the gateways' and clients' storage bounds.
package jobindex
