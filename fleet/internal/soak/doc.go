// Package soak runs the real fleet for a while under every fault at once (issue 38 item 5): two
// worker processes on one JetStream server and a Redis master, its replica and three Sentinels;
// three tenants, one of them hostile (jobs carrying a NATS status header, bodies that do not
// decode, floods past its max_queued, also published around the client's check); and, in turn
// every few minutes, a worker SIGKILLed and started again, a tenant's and the discovery consumer
// deleted, and the Redis master SIGKILLed for Sentinel to promote its replica.
//
// At the end nothing is lost, nothing reached a sandbox twice (the provider's dispatch log, which
// the worker writes outside every sandbox), nothing settled twice, and every `unknown` settlement
// names a job whose dispatch marker a killed worker stored (or one stored while a failover took
// the leases away); the worker that lives through the whole run keeps its RSS, goroutines and
// open files within a bound tied to the jobs it ran. The figures (jobs, rates, each worker's
// resources over time) are printed with -v.
//
// RUNFLEET_SOAK sets the duration, a Go duration: `make soak` runs 30 minutes, the default suite
// 3. The test waits on events (settlements, promotions, consumers made again); its schedule of
// faults is the only clock it keeps.
package soak
