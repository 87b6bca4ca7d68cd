package providertest

import (
	"bytes"
	"context"
	"os/exec"
	"testing"

	"github.com/runfleet/runfleet/internal/profile"
	"github.com/runfleet/runfleet/job"
)

// BenchCycle measures create → run `pass` in python3 → destroy, against baseline, a command run
// in the same loop (the bare interpreter, or `docker run --rm`), as two sub-benchmarks of one run.
func BenchCycle(b *testing.B, e Env, baseline []string) {
	b.Run("baseline", func(b *testing.B) {
		for b.Loop() {
			if out, err := exec.Command(baseline[0], baseline[1:]...).CombinedOutput(); err != nil {
				b.Fatalf("%v: %v: %s", baseline, err, out)
			}
		}
	})
	b.Run("sandbox", func(b *testing.B) { BenchJob(b, e, "pass") })
}

// BenchJob measures create → run code in python3 → destroy.
func BenchJob(b *testing.B, e Env, code string) {
	payload, _ := profile.Payload(job.Request{Code: code})
	for b.Loop() {
		sb := Create(b.Context(), b, e, e.Profiles["python3"], nil)
		exit, err := sb.Run(b.Context(), bytes.NewReader(payload), &bytes.Buffer{}, &bytes.Buffer{})
		if err != nil || exit.Code != 0 {
			b.Fatalf("Run() = %+v, %v", exit, err)
		}
		if err := sb.Destroy(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}
