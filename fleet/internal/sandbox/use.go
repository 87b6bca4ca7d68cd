package sandbox

import (
	"fmt"
	"sync"
)

// Use keeps a sandbox to one job: Assign once, then Run once. Providers embed one per sandbox.
type Use struct {
	mu   sync.Mutex
	job  *Job
	runs int
}

// Assign records the job the sandbox is given to; a second Assign returns [ErrUsed].
func (u *Use) Assign(job Job) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.job != nil {
		return fmt.Errorf("assign to %s: %w", job.ID, ErrUsed)
	}
	u.job = &job
	return nil
}

// Start marks the sandbox's one run and returns its job; a run without an Assign, or a second
// run, returns [ErrUsed].
func (u *Use) Start() (Job, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.job == nil || u.runs > 0 {
		return Job{}, fmt.Errorf("run: %w", ErrUsed)
	}
	u.runs++
	return *u.job, nil
}
