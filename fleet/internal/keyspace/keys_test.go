package keyspace

import (
	"strings"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// TestNames pins every key name byte for byte: old and new workers share one Redis during a
// rolling upgrade, so a name that changes is a change of the storage format.
func TestNames(t *testing.T) {
	t.Parallel()
	k, p := New(""), New("p")
	for _, tc := range []struct{ name, got, want string }{
		{"record", k.Record("default", "job-1"), "runfleet:{b257}:job:default.job-1"},
		{"lease", k.Lease("default", "job-1"), "runfleet:{b257}:lease:default.job-1"},
		{"record of another bucket", k.Record("default", "01J9ZK3Q"), "runfleet:{b769}:job:default.01J9ZK3Q"},
		{"the same id, another tenant", k.Record("acme", "job-1"), "runfleet:{b588}:job:acme.job-1"},
		{"epoch of the job's bucket", k.Epoch(Bucket("default", "x")), "runfleet:{b632}:epoch3"},
		{"first epoch", p.Epoch(0), "p:{b0}:epoch3"},
		{"last epoch", p.Epoch(Buckets - 1), "p:{b1023}:epoch3"},
		{"running", k.Running("acme"), "runfleet:{t:acme}:running"},
		{"usage", k.Usage("acme"), "runfleet:{t:acme}:usage"},
		{"index, every filter", k.Index("", "", ""), "{runfleet:index}:*:*:*"},
		{"index, one filter", p.Index(job.StatusUnknown, "default", "acme"), "{p:index}:unknown:default:acme"},
		{"redrive run", k.RedriveRun("r1"), "{runfleet:index}:redrive:r1"},
		{"redrive stop", k.RedriveStop("r1"), "{runfleet:index}:redrive:r1:stop"},
		{"redrive pos", k.RedrivePos("r1"), "{runfleet:index}:redrive:r1:pos"},
		{"redrive hold", k.RedriveHold("r1"), "{runfleet:index}:redrive:r1:hold"},
		{"redrives running", k.RedrivesRunning(), "{runfleet:index}:redrives:running"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}

// calls is one call of every script.
func calls(k Keys) map[string]Call {
	at := time.Unix(1e9, 0)
	return map[string]Call{
		"claim":     k.Claim("acme", "j", "w", time.Second, 1, at, time.Hour, time.Second, "s"),
		"extend":    k.Extend("acme", "j", 1, "w", time.Second, time.Hour),
		"reserve":   k.Reserve("acme", "j", 1, "w", "sha", "digest", "docker"),
		"associate": k.Associate("acme", "j", 1, "w", "sb"),
		"settle":    k.Settle("acme", "j", 1, "w", "succeeded", time.Hour),
		"release":   k.Release("acme", "j", 1, "w", true),
		"adopt":     k.Adopt("acme", "j", "succeeded", time.Hour, 0, ""),
		"clear":     k.Clear("acme", "j", 1, "w"),
		"acquire":   k.Acquire("acme", time.Second, 2, []string{"w/1", "w/2"}),
		"renew":     k.Renew("acme", time.Second, []string{"w/1"}),
		"hold":      k.HoldRedrive("r", []byte("{}"), []byte("{}"), "w", time.Second, time.Hour),
		"end":       k.EndRedrive("r", []byte("{}"), "w", time.Hour, "done"),
	}
}

// hashTag is the part of key Redis Cluster hashes: what the first {...} holds when not empty.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// TestOneSlot: the keys of every script carry one hash tag, so that it runs on a Redis Cluster
// (a script over two slots fails with CROSSSLOT).
func TestOneSlot(t *testing.T) {
	t.Parallel()
	for name, c := range calls(New("")) {
		for _, key := range c.keys {
			if hashTag(key) != hashTag(c.keys[0]) || hashTag(key) == key {
				t.Errorf("%s: key %q has tag %q, want %q as %q", name, key, hashTag(key), hashTag(c.keys[0]), c.keys[0])
			}
		}
	}
}

// TestScriptsLoad: every script compiles in a real Redis.
func TestScriptsLoad(t *testing.T) {
	t.Parallel()
	rdb := testenv.StartRedis(t).Client()
	for name, c := range calls(New("")) {
		if err := c.Load(t.Context(), rdb).Err(); err != nil {
			t.Errorf("load %s: %v", name, err)
		}
	}
}
