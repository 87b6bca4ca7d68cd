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

// The attach stream's two trailers end it together: stderr output that the daemon forwards after
// stdout's marker still reaches the job, and the demultiplexing ends only at the second marker.
func TestTrailersOfBothStreams(t *testing.T) {
	marker := newMarker()
	var out, errb bytes.Buffer
	var ends int
	stdout := &trailerWriter{next: &out, marker: marker, ends: &ends}
	stderr := &trailerWriter{next: &errb, marker: marker, noStatus: true, ends: &ends}
	if _, err := stdout.Write(append(append([]byte("o\n"), marker...), "256\n"...)); err != nil {
		t.Fatalf("stdout's trailer alone: err %v, want nil (stderr has not ended)", err)
	}
	if _, err := stderr.Write([]byte("e\n")); err != nil {
		t.Fatalf("stderr after stdout's trailer: err %v", err)
	}
	if _, err := stderr.Write(append(append([]byte{}, marker...), '\n')); err != errHeld {
		t.Fatalf("stderr's trailer: err %v, want errHeld", err)
	}
	if out.String() != "o\n" || errb.String() != "e\n" || stdout.status != syscall.WaitStatus(256) {
		t.Errorf("stdout %q, stderr %q, status %v; want o, e, 256", out.String(), errb.String(), stdout.status)
	}
}
