package protocol_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/protocol"
)

func TestAPIPrefix(t *testing.T) {
	t.Parallel()
	// jetstream's constructors read only the connection's options: no server is needed.
	nc := &nats.Conn{}
	withPrefix := func(p string) jetstream.JetStreamOpt {
		return func(o *jetstream.JetStreamOptions) error { o.APIPrefix = p; return nil }
	}
	tests := []struct {
		name string
		js   func() (jetstream.JetStream, error)
		want string
	}{
		{name: "default", js: func() (jetstream.JetStream, error) { return jetstream.New(nc) }, want: "$JS.API."},
		{name: "domain", js: func() (jetstream.JetStream, error) { return jetstream.NewWithDomain(nc, "hub") }, want: "$JS.hub.API."},
		{name: "prefix without dot", js: func() (jetstream.JetStream, error) { return jetstream.NewWithAPIPrefix(nc, "$JS.acme.API") }, want: "$JS.acme.API."},
		{name: "prefix with dot", js: func() (jetstream.JetStream, error) { return jetstream.NewWithAPIPrefix(nc, "imported.JS.") }, want: "imported.JS."},
		// nats.go sends to the domain's prefix whatever an option sets as APIPrefix.
		{name: "domain wins", js: func() (jetstream.JetStream, error) { return jetstream.NewWithDomain(nc, "hub", withPrefix("other.")) }, want: "$JS.hub.API."},
	}
	for _, tt := range tests {
		js, err := tt.js()
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := protocol.APIPrefix(js); got != tt.want {
			t.Errorf("%s: APIPrefix() = %q, want %q", tt.name, got, tt.want)
		}
	}
	js, _ := jetstream.NewWithDomain(nc, "hub")
	if got, want := protocol.KVDirectGetSubject(js, "RUNFLEET_TENANTS", "acme"), "$JS.hub.API.DIRECT.GET.KV_RUNFLEET_TENANTS.$KV.RUNFLEET_TENANTS.acme"; got != want {
		t.Errorf("KVDirectGetSubject() = %q, want %q", got, want)
	}
}

func TestParseDirectGet(t *testing.T) {
	t.Parallel()
	m := nats.NewMsg("_INBOX.x")
	m.Header.Set(protocol.HeaderSequence, "42")
	m.Header.Set(protocol.HeaderSubject, "runfleet.results.j.settled")
	m.Header.Set(protocol.HeaderTimeStamp, "2026-01-02T03:04:05.000000006Z")
	m.Data = []byte("{}")
	sm, err := protocol.ParseDirectGet(m)
	if err != nil || sm.Sequence != 42 || sm.Subject != "runfleet.results.j.settled" || sm.Time.Nanosecond() != 6 {
		t.Errorf("ParseDirectGet() = %+v, %v, want sequence 42 of runfleet.results.j.settled", sm, err)
	}
	missing := nats.NewMsg("_INBOX.x")
	missing.Header.Set("Status", "404")
	if _, err := protocol.ParseDirectGet(missing); !errors.Is(err, protocol.ErrNoMessage) {
		t.Errorf("ParseDirectGet(404) error = %v, want ErrNoMessage", err)
	}
	bad := nats.NewMsg("_INBOX.x")
	bad.Header.Set("Status", "408")
	if _, err := protocol.ParseDirectGet(bad); err == nil || errors.Is(err, protocol.ErrNoMessage) {
		t.Errorf("ParseDirectGet(408) error = %v, want another error", err)
	}
}
