package redact_test

import (
	"strings"
	"testing"

	"github.com/runfleet/runfleet/fleet/internal/redact"
	"github.com/runfleet/runfleet/fleet/internal/redisurl"
)

// TestReviewFormsStillShown (review): two URL forms that nats.go and redisurl accept, whose
// credential redact.URL leaves in place. A scheme-less URL before a schemed one: the list is read
// as one authority and its userinfo starts after the first "://", which is the second URL's.
// A percent-encoded sentinel_password key: url.ParseQuery unescapes it, the regexp does not.
func TestReviewFormsStillShown(t *testing.T) {
	pw := head + tail
	for _, raw := range []string{
		"u:" + pw + "@127.0.0.1:1,nats://v:other@127.0.0.1:2",
		"redis+sentinel://127.0.0.1:1/m?sentinel%5Fpassword=" + pw,
	} {
		if strings.HasPrefix(raw, "redis") {
			u, err := redisurl.Parse(raw)
			if err != nil {
				t.Fatalf("Parse(%q) error = %v; the form must be accepted for the leak to matter", raw, err)
			}
			if u.Failover.SentinelPassword != pw {
				t.Fatalf("SentinelPassword = %q, want %q", u.Failover.SentinelPassword, pw)
			}
			if got := u.Redacted(); strings.Contains(got, head) {
				t.Errorf("Redacted() = %q, shows the sentinel password", got)
			}
			continue
		}
		if got := redact.URL(raw); strings.Contains(got, head) {
			t.Errorf("URL(%q) = %q, shows the password", raw, got)
		}
		if got := redact.Text("dial "+raw+": refused", raw); strings.Contains(got, head) {
			t.Errorf("Text() = %q, shows the password", got)
		}
	}
}
