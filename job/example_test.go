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
	fmt.Println(s.Settled("acme", "6b0f"))
	fmt.Println(s.JobsStream(), s.Consumer("default"))
	// Output:
	// acme-a.jobs.default.acme.6b0f
	// acme-a.results.acme.6b0f.settled
	// ACME_A_JOBS ACME_A_WORKERS_default
}

// Validate refuses what a worker would settle rejected, with the same reason.
func ExampleRequest_Validate() {
	req := job.Request{Language: "python3", Code: "x", Limits: job.Limits{Timeout: -time.Second}}
	_, err := req.Validate(job.DefaultPolicy())
	var re *job.RejectError
	if errors.As(err, &re) {
		fmt.Println(re.Reason)
	}
	// Output: invalid_limits
}

// Exit reads the wire's exit_code, which is absent when the program did not exit on its own.
func ExampleSettlement_Exit() {
	var st job.Settlement
	_ = json.Unmarshal([]byte(`{"job_id":"j","status":"failed","reason":"exit_nonzero","exit_code":3}`), &st)
	code, ok := st.Exit()
	fmt.Println(code, ok)
	_ = json.Unmarshal([]byte(`{"job_id":"k","status":"timed_out","exit_code":null}`), &st)
	code, ok = st.Exit()
	fmt.Println(code, ok)
	// Output:
	// 3 true
	// 0 false
}

// Limits are written as Go values; a zero field is the worker's default and is left out of the
// wire form, where every limit is a positive whole number.
func ExampleLimits() {
	b, _ := json.Marshal(job.Limits{Timeout: 5 * time.Second, MemoryBytes: 256 << 20})
	fmt.Println(string(b))
	// Output: {"timeout_ms":5000,"memory_bytes":268435456}
}
