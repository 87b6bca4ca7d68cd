package redact_test

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/runfleet/runfleet/fleet/internal/cli"
	"github.com/runfleet/runfleet/fleet/internal/redact"
	"github.com/runfleet/runfleet/fleet/internal/redisurl"
)

// The password's two halves are distinctive, so that any fragment of it a parser quotes shows.
const head, tail = "Hq7Zx", "Wp3Kv"

// forms are the URL forms nats.go and go-redis accept, with PW where the password goes.
var forms = []string{
	"nats://u:PW@127.0.0.1:1",
	"u:PW@127.0.0.1:1", // nats.go reads it as nats://
	"nats://PW@127.0.0.1:1",
	"nats://u:PW@127.0.0.1:1,nats://u:PW@127.0.0.1:2",
	"tls://u:PW@127.0.0.1:1",
	"redis://:PW@127.0.0.1:1/0",
	"redis://u:PW@127.0.0.1:1",
	"rediss://u:PW@127.0.0.1:1",
	"redis+sentinel://:PW@127.0.0.1:1,127.0.0.1:2/m/1?sentinel_password=PW",
	"redis+sentinel://127.0.0.1:1/m?sentinel_password=PW&x=1",
	"redis+cluster://:PW@127.0.0.1:1,127.0.0.1:2",
}

// TestNoCredentialShown: for passwords holding each character a URL reserves, neither the
// redacted URL nor the error of parsing or connecting with it shows any part of the password.
func TestNoCredentialShown(t *testing.T) {
	for _, sep := range []string{"/", "@", ":", "%", "#", "?", "%2F", "", ","} {
		pw := head + sep + tail
		for _, form := range forms {
			raw := strings.ReplaceAll(form, "PW", pw)
			t.Run(fmt.Sprintf("%q/%s", sep, form), func(t *testing.T) {
				shown := map[string]string{"redact.URL": redact.URL(raw)}
				if strings.HasPrefix(raw, "redis") {
					if _, err := redisurl.Parse(raw); err != nil {
						shown["redisurl.Parse"] = err.Error()
					}
				} else {
					n := cli.NATS{URL: raw}
					if _, err := n.Options(); err != nil {
						shown["NATS.Options"] = err.Error()
					} else if _, err := cli.ConnectNATS(n, "redact-test", slog.New(slog.DiscardHandler)); err != nil {
						shown["ConnectNATS"] = err.Error()
					} else {
						t.Fatal("connected to a port nothing listens on")
					}
				}
				for what, text := range shown {
					if strings.Contains(text, head) || strings.Contains(text, tail) {
						t.Errorf("%s shows the password %q: %s", what, pw, text)
					}
				}
			})
		}
	}
}

func TestURL(t *testing.T) {
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":                            "nats://127.0.0.1:4222",
		"nats://user:pw@h1:4222,nats://tok3n@h2:4222":      "nats://REDACTED@h1:4222,nats://REDACTED@h2:4222",
		"user:pw@h:4222":                                   "REDACTED@h:4222",
		"nats://u:a/b@h:4222":                              "nats://REDACTED@h:4222",
		"redis://u:a/b?c#d@h:1/0":                          "redis://REDACTED@h:1/0",
		"redis+sentinel://a:1,b:2/m?sentinel_password=x@y": "redis+sentinel://a:1,b:2/m?sentinel_password=REDACTED",
	} {
		if got := redact.URL(in); got != want {
			t.Errorf("URL(%q) = %q, want %q", in, got, want)
		}
	}
}
