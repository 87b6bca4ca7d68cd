package job_test

import (
	"errors"
	"testing"

	"github.com/runfleet/runfleet/job"
)

func TestParseJob(t *testing.T) {
	s, err := job.NewSubjects("")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		subject           string
		queue, tenant, id string
		err               error
	}{
		{subject: "runfleet.jobs.default.acme.j-1", queue: "default", tenant: "acme", id: "j-1"},
		{subject: s.Job("gpu", "t_2", "ABC"), queue: "gpu", tenant: "t_2", id: "ABC"},
		{subject: "runfleet.jobs.default.j-1", err: job.ErrInvalidJobSubject},
		{subject: "runfleet.jobs.default.acme.j.1", err: job.ErrInvalidJobSubject},
		{subject: "other.jobs.default.acme.j-1", err: job.ErrInvalidJobSubject},
		{subject: "runfleet.jobs.Default.acme.j-1", err: job.ErrInvalidQueue},
		{subject: "runfleet.jobs.default.-acme.j-1", err: job.ErrInvalidTenant},
		{subject: "runfleet.jobs.default.acme.-j", err: job.ErrInvalidID},
	} {
		q, tn, id, err := s.ParseJob(tc.subject)
		if !errors.Is(err, tc.err) || q != tc.queue || tn != tc.tenant || id != tc.id {
			t.Errorf("ParseJob(%q) = %q, %q, %q, %v; want %q, %q, %q, %v", tc.subject, q, tn, id, err, tc.queue, tc.tenant, tc.id, tc.err)
		}
	}
}

func TestNewID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := job.NewID()
		if !job.ValidID(id) || len(id) != 36 || id[14] != '4' {
			t.Fatalf("NewID() = %q: want a valid id, a version 4 UUID", id)
		}
		if seen[id] {
			t.Fatalf("NewID() repeated %q", id)
		}
		seen[id] = true
	}
}
