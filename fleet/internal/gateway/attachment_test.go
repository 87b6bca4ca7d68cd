package gateway

import (
	"mime"
	"testing"
)

// TestAttachment: the download name of an artifact is its last element, with no control
// character and valid UTF-8, whatever the job named it; the header parses back to that name.
func TestAttachment(t *testing.T) {
	cases := []struct{ path, want string }{
		{"out/data.bin", "data.bin"},
		{"report.csv", "report.csv"},
		{"out/\x1b[2K\rsubmit: ok\a.txt", "_[2K_submit: ok_.txt"},
		{"a\r\nSet-Cookie: x=1", "a__Set-Cookie: x=1"},
		{"caf\xe9.txt", "caf\uFFFD.txt"},
		{"résumé \"final\".pdf", "résumé \"final\".pdf"},
		{"out/..", "artifact"},
	}
	for _, c := range cases {
		h := attachment(c.path)
		disp, params, err := mime.ParseMediaType(h)
		if err != nil || disp != "attachment" || params["filename"] != c.want {
			t.Errorf("attachment(%q) = %q, parsed %q %q %v; want attachment, filename %q", c.path, h, disp, params["filename"], err, c.want)
		}
		for _, b := range []byte(h) {
			if b < ' ' || b > '~' {
				t.Errorf("attachment(%q) = %q holds byte %#x, want printable ASCII", c.path, h, b)
			}
		}
	}
}
