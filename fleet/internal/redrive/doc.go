// Package redrive runs settled jobs again (docs/protocol.md "Listing, inspecting and
// redriving"), one or many, as a service the fleet's workers answer over NATS.
//
// Invariants:
//
//   - A redrive publishes the job's stored request again as a new job, on the same queue and
//     tenant, with id job.RedriveID(old) and redrive_of set; the deadline is dropped (the operator
//     decides now). The old job, its record and its settlement never change.
//   - Idempotent: the new id is derived from the old one, and the jobs stream keeps one message per
//     id for the retention, so a repeated call (a retry, a second bulk run over the same jobs)
//     finds the job the first one published and reports it as a duplicate. To run a job a third
//     time, redrive its redrive.
//   - An unknown job's code may have run: it is redriven only with confirm_may_have_run. Succeeded
//     and rejected jobs are never redriven.
//   - A bulk run counts its filter first (the dry run's answer), fixes the window's end at its
//     start so that the jobs it publishes are never picked up by itself, publishes at most
//     rate_per_s jobs a second, and writes its progress to Redis after every job, where any worker
//     answers a GET and a stop. The worker that runs it checks the stop at every job.
//   - A bulk run is held by one worker at a time: a hold in Redis that the holder renews with each
//     write of its progress (a script that writes nothing for a worker that no longer holds it),
//     and that expires HoldTTL after a holder died or hung. Every worker looks for runs not ended
//     and not held every HoldTTL/3 and takes them over, going on from the saved position (page
//     cursor and jobs done in the page); a job redriven again after a takeover is found as a
//     duplicate, never published twice. A worker that stops lets go of its runs at once.
package redrive
