// Package cli holds what the programs share at their edge: flags that also read RUNFLEET_*
// environment variables, and one-line errors.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
)

// EnvName is the variable a flag reads: RUNFLEET_ and the name in upper case, '-' as '_'.
func EnvName(flagName string) string {
	return "RUNFLEET_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// ErrVersion is returned by the parse functions when --version was given; the program prints
// its version and exits 0.
var ErrVersion = errors.New("version requested")

// UsageError is a command line that does not parse: one line, which the program prints with a
// hint to --help, instead of the flag package's whole usage.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Parse parses args into fs, then sets every flag not given on the command line from its
// environment variable, so that a flag on the command line wins. --help prints fs's usage and
// returns flag.ErrHelp; --version returns [ErrVersion]; a bad flag is a *[UsageError].
func Parse(fs *flag.FlagSet, args []string, getenv func(string) string) error {
	_, _, err := parse(fs, args, getenv, func(string) bool { return true }, false)
	return err
}

// ParseEnvOf is Parse where only the flags named in envFlags read the environment: a program's
// connection settings may come from RUNFLEET_*, while what it sends (a job's id or code) never
// does, so a worker's RUNFLEET_ID cannot leak into a job.
func ParseEnvOf(fs *flag.FlagSet, args []string, getenv func(string) string, envFlags ...string) error {
	_, _, err := parse(fs, args, getenv, func(name string) bool { return slices.Contains(envFlags, name) }, false)
	return err
}

// ParseInterspersed is ParseEnvOf where flags may come anywhere on the line, before or after the
// positional arguments, as in docker or git; a "--" ends the flags, and what follows it is
// returned apart (a program's own arguments).
func ParseInterspersed(fs *flag.FlagSet, args []string, getenv func(string) string, envFlags ...string) (positional, afterDash []string, err error) {
	return parse(fs, args, getenv, func(name string) bool { return slices.Contains(envFlags, name) }, true)
}

func parse(fs *flag.FlagSet, args []string, getenv func(string) string, readsEnv func(string) bool, intersperse bool) (positional, afterDash []string, err error) {
	var version bool
	if fs.Lookup("version") == nil {
		fs.BoolVar(&version, "version", false, "print the version and exit")
	}
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	defer func() { fs.Usage = usage; fs.SetOutput(out) }()
	given := map[string]bool{}
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.SetOutput(out)
				usage()
				return nil, nil, err
			}
			return nil, nil, &UsageError{doubleDash(err)}
		}
		fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
		left := fs.Args()
		if used := len(rest) - len(left); used > 0 && rest[used-1] == "--" {
			afterDash = left
			break
		}
		if len(left) == 0 {
			break
		}
		if !intersperse {
			positional = left
			break
		}
		positional = append(positional, left[0])
		rest = left[1:]
	}
	if version {
		return nil, nil, ErrVersion
	}
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || err != nil || !readsEnv(f.Name) {
			return
		}
		if v := getenv(EnvName(f.Name)); v != "" {
			if serr := f.Value.Set(v); serr != nil {
				err = fmt.Errorf("%s=%q: %w", EnvName(f.Name), v, serr)
			}
		}
	})
	return positional, afterDash, err
}

// flagName is where the flag package names a flag in its errors, with one dash.
var flagName = regexp.MustCompile(`(not defined: |for flag |needs an argument: )-([^-])`)

// doubleDash names flags in the flag package's errors as the usage spells them, --name.
func doubleDash(err error) error {
	msg := err.Error()
	if fixed := flagName.ReplaceAllString(msg, "$1--$2"); fixed != msg {
		return errors.New(fixed)
	}
	return err
}

// Fail is how a program reports a command line that does not parse: one line, with the hint.
func Fail(w io.Writer, program string, err error) {
	fmt.Fprintf(w, "%s: %v (run '%s --help' for usage)\n", program, err, program)
}

// PrintFlags writes fs's flags as a usage lists them, which --help prints: double-dash names,
// the kind of value, and the default when it is not the zero value.
func PrintFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		kind, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if kind != "" {
			line += " " + kind
		}
		switch f.DefValue {
		case "", "0", "false", "[]":
		default:
			usage += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "%s\n        %s\n", line, usage)
	})
}

// List is a repeatable flag.
type List []string

func (l *List) String() string     { return strings.Join(*l, ",") }
func (l *List) Set(v string) error { *l = append(*l, v); return nil }

// Exit reports the error a program's run returned and gives its exit code: 0 for nil, a help
// request or --version (which prints "program version" on stdout), 2 with one line and the hint
// for a command line that does not parse, and 1 with one line for anything else.
func Exit(stdout, stderr io.Writer, program, version string, err error) int {
	var ue *UsageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, ErrVersion):
		fmt.Fprintln(stdout, program, Version(version))
		return 0
	case errors.As(err, &ue):
		Fail(stderr, program, err)
		return 2
	}
	fmt.Fprintf(stderr, "%s: %v\n", program, err)
	return 1
}

// Version is v, the version the build set, with the commit it was built from when Go recorded it.
// A program built without a version (`go install …/cmd/worker@v0.1.0` sets none) reports its
// module's version.
func Version(v string) string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	return version(v, info)
}

func version(v string, info *debug.BuildInfo) string {
	if v == "dev" && info.Main.Version != "" && info.Main.Version != "(devel)" {
		v = info.Main.Version
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev == "" {
		return v + " " + info.GoVersion
	}
	return v + " (" + rev + dirty + ", " + info.GoVersion + ")"
}
