package cli

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
)

// TestParseErrorsNameFlagsAsTyped: an error names the flag as the user typed it (-q, not --q),
// and otherwise as the usage spells it; it is a *UsageError.
func TestParseErrorsNameFlagsAsTyped(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-q"}, "flag provided but not defined: -q"},
		{[]string{"--q"}, "flag provided but not defined: --q"},
		{[]string{"--bogus=1"}, "flag provided but not defined: --bogus"},
		{[]string{"-bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"--jobs", "x"}, `invalid value "x" for flag --jobs: parse error`},
		{[]string{"-jobs=x"}, `invalid value "x" for flag -jobs: parse error`},
		{[]string{"--jobs"}, "flag needs an argument: --jobs"},
	} {
		fs := flag.NewFlagSet("p", flag.ContinueOnError)
		fs.Int("jobs", 1, "")
		err := Parse(fs, tt.args, func(string) string { return "" })
		var ue *UsageError
		if !errors.As(err, &ue) || err.Error() != tt.want {
			t.Errorf("Parse(%q) = %v, want the usage error %q", tt.args, err, tt.want)
		}
	}
}

// TestHelpOnStdout: --help prints the usage and the flags, spelled --name, on stdout, and exits 0.
func TestHelpOnStdout(t *testing.T) {
	var stdout, stderr bytes.Buffer
	fs := NewFlagSet("p", "usage: p [flags]\n", &stdout)
	fs.Int("jobs", 3, "jobs to send")
	fs.Int("warm", -1, "waiting sandboxes (default --concurrency)")
	err := Parse(fs, []string{"--help"}, func(string) string { return "" })
	if code := Exit(&stdout, &stderr, "p", err); code != 0 || stderr.Len() != 0 {
		t.Errorf("--help = exit %d, stderr %q; want 0 and nothing on stderr", code, stderr.String())
	}
	want := "usage: p [flags]\n  --jobs int\n        jobs to send (default 3)\n  --version\n        print the version and exit\n  --warm int\n        waiting sandboxes (default --concurrency)\n"
	if got := stdout.String(); got != want {
		t.Errorf("--help printed\n%s\nwant\n%s", got, want)
	}
	stdout.Reset()
	if code := Exit(&stdout, &stderr, "p", Parse(NewFlagSet("p", "", &stdout), []string{"--nope"}, func(string) string { return "" })); code != ExitUsage ||
		!strings.Contains(stderr.String(), "p: flag provided but not defined: --nope (run 'p --help' for usage)") {
		t.Errorf("a bad flag = exit %d, stderr %q; want %d and one line with the hint", code, stderr.String(), ExitUsage)
	}
}
