package job_test

import (
	"errors"
	"testing"

	"github.com/runfleet/runfleet/job"
)

func TestSettlementErr(t *testing.T) {
	three := 3
	cases := []struct {
		name string
		st   job.Settlement
		want string // "" for nil
		as   any
	}{
		{"succeeded", job.Settlement{JobID: "j", Status: job.StatusSucceeded}, "", nil},
		{"rejected", job.Settlement{JobID: "j", Status: job.StatusRejected, Reason: job.ReasonUnknownLanguage, Detail: "no profile"},
			"job j rejected: unknown_language: no profile", new(*job.RejectError)},
		{"failed", job.Settlement{JobID: "j", Status: job.StatusFailed, Reason: job.ReasonExitNonzero, ExitCode: &three},
			"job j failed: exit_nonzero 3", new(*job.OutcomeError)},
		{"timed out", job.Settlement{JobID: "j", Status: job.StatusTimedOut}, "job j timed_out", new(*job.OutcomeError)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.st.Err()
			if c.want == "" {
				if err != nil {
					t.Errorf("Err() = %v, want nil", err)
				}
				return
			}
			if err == nil || err.Error() != c.want || !errors.As(err, c.as) {
				t.Errorf("Err() = %v (%T), want %q as %T", err, err, c.want, c.as)
			}
		})
	}
}
