package job_test

import (
	"errors"
	"fmt"

	"github.com/runfleet/runfleet/job"
)

func ExampleNewSubjects() {
	s, _ := job.NewSubjects("acme-a")
	fmt.Println(s.Jobs("default"))
	fmt.Println(s.Settled("6b0f"))
	fmt.Println(s.JobsStream(), s.Consumer("default"))
	// Output:
	// acme-a.jobs.default
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
