// Package fairshare decides which tenant a worker serves next (docs/protocol.md, "Tenants",
// guarantee G12).
//
// The jobs stream keeps one durable consumer per queue and tenant (internal/queue); a consumer
// delivers in stream order, so fairness cannot come from the server. A worker's [Scheduler] holds
// the tenant consumers it knows and which of them may have jobs waiting (active), and each time
// the worker has free slots it picks, among the active ones whose tenant may start another job,
// the tenant that used the least sandbox CPU time per unit of weight:
//
//   - Usage is usage.cpu_ms of the tenant's settled jobs, decayed exponentially (time constant
//     [Options.Window]), plus an estimate for each job picked and not yet settled (the tenant's
//     own average), replaced by the measured time when it settles. Jobs are not counted: a
//     tenant whose jobs cost twice as much gets half as many.
//   - A tenant that becomes active after being idle starts at the least usage per weight of the
//     tenants already active, not below it: it does not bank credit while idle, and it does not
//     wait behind what the others used before it came.
//   - Nothing idles for fairness' sake: a pick takes the best active tenant, whatever its share,
//     and a fetch that finds a consumer empty marks it idle until the stream says otherwise.
//     The server counts a job in a consumer's backlog a moment after it announces it (later the
//     busier it is), so a fetch that comes short of the last job announced, by its stream
//     sequence, is made again at growing intervals, a few times, before the consumer counts as
//     idle: else the job would wait for the next announcement of its tenant, or the periodic
//     listing. A fetch that brought the announced job is not repeated.
//
// Each worker is fair on its own; since every worker serves every tenant and picks the same way,
// the fleet's shares are the workers' shares. The one bound that must hold across the fleet,
// max_running, is kept in Redis ([Running]): a sorted set per tenant of the slots held, scored
// by their expiry, taken before the fetch (a job fetched and then put back would count as a
// redelivery, which the claim treats as "may have run") and renewed while the job holds it. A
// worker that dies leaves its entries to expire with its leases' TTL.
//
// The scheduler learns which tenants are active from the jobs stream's headers-only republish
// (runfleet.arrived.<queue>.<tenant>.<job>) and from a periodic listing of the tenant
// consumers (their pending counts: redeliveries are republished by no one). A consumer lost and
// made again (package runner's sweep notices it missing from the listing) takes the place of the
// old one in the scheduler ([Scheduler.Replace]).
package fairshare
