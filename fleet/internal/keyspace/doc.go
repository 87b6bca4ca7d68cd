// Package keyspace owns the fleet's Redis keyspace: every key name, hash tag and Lua script. Other
// packages name keys with [Keys] and run scripts as the [Call]s it builds; none spells a key or
// holds a script (a test fails when one does). The scripts are the files under scripts/, each
// with a header naming its KEYS and ARGV.
//
// # Keys
//
// Every key starts with the fleet's prefix (job.DefaultPrefix, "runfleet", unless the worker's
// -prefix says otherwise) and carries one Redis Cluster hash tag, which names the group of keys
// it is written with: a script, or a MULTI, touches the keys of one group only, since Redis
// Cluster refuses (CROSSSLOT) a script or transaction whose keys hash to two slots.
//
//	key                                   type    owner      TTL                     group (hash tag)
//	<p>:{b<k>}:job:<tenant>.<id>          hash    lease      RecordTTL, 7 d          {b<k>}: the job's bucket
//	<p>:{b<k>}:lease:<tenant>.<id>        string  lease      lease TTL, 10 s         {b<k>}
//	<p>:{b<k>}:epoch3                     string  lease      none                    {b<k>}
//	<p>:{t:<tenant>}:running              zset    fairshare  2 × lease TTL           {t:<tenant>}: one tenant
//	<p>:{t:<tenant>}:usage                hash    jobindex   none; fields trimmed    {t:<tenant>}
//	{<p>:index}:<status>:<queue>:<tenant> zset    jobindex   none; rows trimmed      {<p>:index}: the index
//	{<p>:index}:redrive:<run>             string  redrive    retention, 7 d          {<p>:index}
//	{<p>:index}:redrive:<run>:pos         string  redrive    retention               {<p>:index}
//	{<p>:index}:redrive:<run>:stop        string  redrive    retention               {<p>:index}
//	{<p>:index}:redrive:<run>:hold        string  redrive    HoldTTL, 15 s           {<p>:index}
//	{<p>:index}:redrives:running          set     redrive    none                    {<p>:index}
//
// The groups, and why each is as wide as it is:
//
//   - A job's bucket, k = FNV-1a of "<tenant>.<id>" modulo [Buckets] (1024): a job is its tenant
//     and its id (protocol version 3), and two tenants' jobs of one id have two records. Every
//     lease script touches a job's record and lease, and claim.lua its bucket's epoch too, so the
//     three share the tag.
//     No script touches a key shared by all jobs. The 1024 buckets land on 1016 distinct slots,
//     enough that a Cluster spreads them evenly over its shards and can move them a few at a
//     time, and few enough that lease's Init sets every bucket's epoch in one pipeline. The count
//     and the hash are part of the names: changing either hides every stored record.
//   - A tenant: acquire.lua and renew.lua touch that tenant's running set only, so tenants spread
//     over the shards.
//   - The index, with the redrive runs: a page of the index reads one set, but a row is added to
//     eight sets in one pipeline and a bulk run's scripts and Start's MULTI touch several of its
//     keys, and the runs are the index's readers; one slot holds them all. No script touches the
//     index and a job's keys together. The index's filter sets never clash with the runs' keys:
//     no status is called redrive or redrives.
//
// # One scheme, two spellings
//
// The job and tenant groups put the prefix before the tag (`<p>:{b<k>}`); the index puts it
// inside (`{<p>:index}`), so two fleets sharing a Cluster keep their indexes on different slots.
// The names are kept exactly as the workers before this package wrote them, on purpose: during a
// rolling upgrade old and new workers share one Redis, and a renamed key would hide a job's
// record (a job run twice), a tenant's running slots (max_running exceeded), or the index.
// A change to any name here is a change of the storage format, to be made with a migration.
//
// Protocol version 3 made one such change: a job's record and lease name its tenant, and the
// buckets' epochs moved to `epoch3`, so that a job stored before the first version-3 worker
// started and redelivered without a version-3 record counts as in doubt (record_lost): its
// claim asks its dispatch marker, a version-2 one included (package queue's GateHolder), and it
// never runs twice across the upgrade. The version-2 keys expire with their TTL.
package keyspace
