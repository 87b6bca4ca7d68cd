package job_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/runfleet/runfleet/job"
)

func ExampleNewSubjects() {
	s, _ := job.NewSubjects("acme-a")
	fmt.Println(s.Job("default", "acme", "6b0f"))
	fmt.Println(s.Settled("6b0f"))
	fmt.Println(s.JobsStream(), s.Consumer("default"))
	// Output:
	// acme-a.jobs.default.acme.6b0f
	// acme-a.results.6b0f.settled
	// ACME_A_JOBS ACME_A_WORKERS_default
}

func ExampleDecode() {
	p := job.DefaultPolicy()
	_, _, err := job.Decode([]byte(`{"language":"python3","code":"x","limits":{"timeout_ms":0}}`), "job-1", p)
	var re *job.RejectError
	if errors.As(err, &re) {
		fmt.Println(re.Reason)
	}
	// Output: invalid_limits
}

// Limits are written as Go values; a zero field is the worker's default and is left out of the
// wire form, where every limit is a positive whole number.
func ExampleLimits() {
	b, _ := json.Marshal(job.Limits{Timeout: 5 * time.Second, MemoryBytes: 256 << 20})
	fmt.Println(string(b))
	// Output: {"timeout_ms":5000,"memory_bytes":268435456}
}
