package queue

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestParseAck reads both ack subject forms a server sends, and refuses what is neither.
func TestParseAck(t *testing.T) {
	want := jetstream.MsgMetadata{Stream: "RUNFLEET_JOBS", Consumer: "C", NumDelivered: 2, NumPending: 7,
		Timestamp: time.Unix(0, 1796403746224556616)}
	want.Sequence.Stream, want.Sequence.Consumer = 11, 5
	withDomain := want
	withDomain.Domain = "hub"
	for _, tc := range []struct {
		reply string
		want  *jetstream.MsgMetadata
	}{
		{"$JS.ACK.RUNFLEET_JOBS.C.2.11.5.1796403746224556616.7", &want},
		{"$JS.ACK._.ACCHASH.RUNFLEET_JOBS.C.2.11.5.1796403746224556616.7.rand", &want},
		{"$JS.ACK.hub.ACCHASH.RUNFLEET_JOBS.C.2.11.5.1796403746224556616.7", &withDomain},
		{"$JS.ACK.RUNFLEET_JOBS.C.2.11.5.1796403746224556616", nil},
		{"$JS.ACK.RUNFLEET_JOBS.C.2.11.5.1796403746224556616.7.x", nil},
		{"$JS.ACK.RUNFLEET_JOBS.C.two.11.5.1796403746224556616.7", nil},
		{"_INBOX.RUNFLEET_JOBS.C.2.11.5.1796403746224556616.7", nil},
		{"", nil},
	} {
		got, err := parseAck(tc.reply)
		if tc.want == nil {
			if !errors.Is(err, jetstream.ErrNotJSMessage) {
				t.Errorf("parseAck(%q) = %+v, %v; want ErrNotJSMessage", tc.reply, got, err)
			}
			continue
		}
		if err != nil || *got != *tc.want {
			t.Errorf("parseAck(%q) = %+v, %v; want %+v", tc.reply, got, err, tc.want)
		}
	}
}
