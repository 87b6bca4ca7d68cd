package sse_test

import (
	"net/http/httptest"
	"testing"

	"github.com/runfleet/runfleet/fleet/internal/sse"
)

func TestWriter(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		write func(*sse.Writer) error
		want  string
	}{
		{"event", func(s *sse.Writer) error { return s.Send(sse.Event{Name: "page", Data: `{"a":1}`}) },
			"event: page\ndata: {\"a\":1}\n\n"},
		{"with an id", func(s *sse.Writer) error { return s.Send(sse.Event{ID: "42", Name: "page", Data: "x"}) },
			"id: 42\nevent: page\ndata: x\n\n"},
		{"lines", func(s *sse.Writer) error { return s.Send(sse.Event{Name: "overview", Data: "a\r\nb\n\nc"}) },
			"event: overview\ndata: a\ndata: b\ndata: \ndata: c\n\n"},
		{"no name", func(s *sse.Writer) error { return s.Send(sse.Event{Data: "x"}) }, "data: x\n\n"},
		{"comment", func(s *sse.Writer) error { return s.Comment("keep-alive") }, ": keep-alive\n\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := httptest.NewRecorder()
			s, err := sse.Start(rec)
			if err != nil {
				t.Fatal(err)
			}
			if err := tt.write(s); err != nil {
				t.Fatal(err)
			}
			if got := rec.Body.String(); got != tt.want {
				t.Errorf("body = %q, want %q", got, tt.want)
			}
			if got := rec.Header().Get("Content-Type"); got != "text/event-stream" {
				t.Errorf("Content-Type = %q, want text/event-stream", got)
			}
			if !rec.Flushed {
				t.Error("not flushed")
			}
		})
	}
}
