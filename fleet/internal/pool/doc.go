// Package pool keeps sandboxes created ahead, so that a job's sandbox is already waiting when the
// job arrives: the runner takes one (runner → pool → provider) instead of creating it on the job's
// critical path.
//
// A [Pool] keeps, per profile, up to Options.Size sandboxes created from the profile's [sandbox.Shape]
// and waiting on stdin. Invariants:
//   - A waiting sandbox has never held any job's data: it was made from a shape alone (G7), and
//     the pool hands each one out once, to one Take, and never takes it back. The taker assigns,
//     runs and destroys it; the provider refuses a second Assign or Run (sandbox.ErrUsed).
//   - A job whose shape a waiting sandbox does not fit (another profile digest, other tmpfs sizes)
//     gets one created for it, as it would without a pool; so does a job that finds none waiting.
//     Take never waits for a refill.
//   - Refills run in the background, at most Options.Refills creations at once across every
//     profile, so that they cannot take more of the machine than that from running jobs. A
//     failing creation backs off (1 s doubling to 30 s) instead of spinning.
//   - A sandbox that waited longer than Options.MaxAge is destroyed and replaced (checked every
//     second), so that nothing waits for ever on state that ages (clock, entropy, caches).
//   - [Pool.Run] owns every goroutine of the pool and returns only when all have ended and every
//     waiting sandbox is destroyed; a creation that ends after that is destroyed, not kept.
//   - A worker that dies leaves its waiting sandboxes to the mechanisms of package sandbox: each
//     ends within 2 s of its worker's death, and the providers' reapers remove what is left.
package pool
