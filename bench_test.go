package runfleet_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/job"
)

// BenchmarkLookup measures what a lookup costs beside a queue of waiting jobs, which JetStream
// cannot search by id: the newest job of a queue (a watch right after a submit), and an id the
// fleet never accepted (every waiting job read). Compare the rows of one run: the waiting=0 row
// is the baseline.
func BenchmarkLookup(b *testing.B) {
	for _, waiting := range []int{0, 100, 1000} {
		c, _ := newClient(b, runfleet.Options{Prefix: fmt.Sprintf("lookup%d", waiting)})
		newest := ""
		for i := range waiting {
			sub, err := c.Submit(b.Context(), "unserved", job.Request{Language: "python3", Code: "print(1)", Stdin: fmt.Sprint(i)}, nil)
			if err != nil {
				b.Fatal(err)
			}
			newest = sub.ID
		}
		b.Run(fmt.Sprintf("unknown/waiting=%d", waiting), func(b *testing.B) {
			for b.Loop() {
				if _, err := c.Settlement(b.Context(), "never-accepted"); !errors.Is(err, runfleet.ErrNotFound) {
					b.Fatal(err)
				}
			}
		})
		if newest == "" {
			continue
		}
		b.Run(fmt.Sprintf("newest/waiting=%d", waiting), func(b *testing.B) {
			for b.Loop() {
				if _, err := c.Settlement(b.Context(), newest); !errors.Is(err, runfleet.ErrNoSettlement) {
					b.Fatal(err)
				}
			}
		})
	}
}
