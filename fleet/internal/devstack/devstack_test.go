package devstack_test

import (
	"fmt"
	"os/exec"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/fleet/internal/devstack"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// TestStreamsFitWhateverTheDisk: the dev stack holds the streams of several fleets at their
// default bounds (10 GiB of jobs each) on any disk. With the server's default budget, three
// quarters of the free disk, a CI machine with 30 GB free refused the third prefix's streams.
func TestStreamsFitWhateverTheDisk(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		testenv.Missing(t, "redis-server")
	}
	s, err := devstack.Start(t.Context(), fmt.Sprintf("nats://127.0.0.1:%d", testenv.FreePort(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	nc, err := nats.Connect(s.NATSURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 12 { // 120 GiB reserved: more than this machine's free disk, at most 1 TiB
		subj, err := job.NewSubjects(fmt.Sprintf("dev%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if err := protocol.EnsureStreams(t.Context(), js, subj, protocol.StreamOptions{}); err != nil {
			t.Fatalf("prefix %d: %v", i, err)
		}
	}
}
