package docker

import (
	"bytes"
	"syscall"
	"testing"
)

// The marker ends the output wherever writes cut it; output that only looks like its start
// passes on, and nothing after the marker does.
func TestTrailerWriter(t *testing.T) {
	marker, forged := newMarker(), append(newMarker(), "0\n"...)
	cases := []struct {
		name   string
		writes [][]byte
		want   string
	}{
		{"alone", [][]byte{append(append([]byte{}, marker...), "0\n"...)}, ""},
		{"after output", [][]byte{[]byte("out\n"), append(append([]byte("more"), marker...), "0\n"...)}, "out\nmore"},
		{"cut in the marker", [][]byte{append([]byte("a\x00"), marker[:5]...), append(append([]byte{}, marker[5:]...), "0"...), []byte("\nignored")}, "a\x00"},
		{"a NUL that is not the marker", [][]byte{[]byte("x\x00"), []byte("y"), append(append([]byte{}, marker...), "0\n"...)}, "x\x00y"},
		{"a marker the program made up", [][]byte{forged, append(append([]byte{}, marker...), "0\n"...)}, string(forged)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			w := &trailerWriter{next: &out, marker: marker}
			var err error
			for _, b := range c.writes {
				if _, err = w.Write(b); err != nil {
					break
				}
			}
			if err != errHeld || !w.done || w.status != syscall.WaitStatus(0) {
				t.Fatalf("after the marker: err %v, done %v, status %v; want errHeld, done, 0", err, w.done, w.status)
			}
			if got := out.String(); got != c.want {
				t.Errorf("passed on %q, want %q", got, c.want)
			}
		})
	}
}
