// Package cli holds what the programs share at their edge: flags that also read RUNFLEET_*
// environment variables, and one-line errors.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
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
			return nil, nil, &UsageError{asTyped(err, rest)}
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
var flagName = regexp.MustCompile(`(not defined: |for flag |needs an argument: )-([^\s:]+)`)

// asTyped names the flag in the flag package's errors as the user typed it among args (-q stays
// -q), else as the usage spells it, --name; the flag package always writes one dash.
func asTyped(err error, args []string) error {
	msg := err.Error()
	fixed := flagName.ReplaceAllStringFunc(msg, func(m string) string {
		sub := flagName.FindStringSubmatch(m)
		name := sub[2]
		for _, a := range args {
			if a == "--" {
				break
			}
			if typed, _, _ := strings.Cut(a, "="); typed == "-"+name || typed == "--"+name {
				return sub[1] + typed
			}
		}
		return sub[1] + "--" + name
	})
	if fixed != msg {
		return errors.New(fixed)
	}
	return err
}

// Fail is how a program reports a command line that does not parse: one line, with the hint.
func Fail(w io.Writer, program string, err error) {
	fmt.Fprintf(w, "%s: %v (run '%s --help' for usage)\n", program, err, program)
}

// NewFlagSet is a flag set whose --help prints text, then the flags as [PrintFlags] lists them,
// on stdout: help asked for is the program's output, not an error.
func NewFlagSet(name, text string, stdout io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stdout)
	fs.Usage = func() { fmt.Fprint(stdout, text); PrintFlags(stdout, fs) }
	return fs
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
			if strings.Contains(usage, "(default") {
				break // the usage says it in words
			}
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
// request or --version (which prints "program version (commit, go version)" on stdout), 2 with one
// line and the hint for a command line that does not parse, and 1 with one line for anything else.
func Exit(stdout, stderr io.Writer, program string, err error) int {
	var ue *UsageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, ErrVersion):
		fmt.Fprintln(stdout, program, versionLine())
		return 0
	case errors.As(err, &ue):
		Fail(stderr, program, err)
		return ExitUsage
	}
	fmt.Fprintf(stderr, "%s: %v\n", program, err)
	return 1
}

// ExitUsage is the exit code of a command line that does not parse, as for most Unix tools.
const ExitUsage = 2

// version is the release a build names:
// -ldflags "-X github.com/runfleet/runfleet/fleet/internal/cli.version=v1.2.3" (make build does).
var version = "dev"

// Version is the version of the running program, the one home of it: --version, the start-up log
// line and the worker's heartbeat all say it. It is the version the build set, else the module
// version Go recorded (`go install …/fleet/cmd/worker@v0.1.0` sets no ldflags), else "dev".
func Version() string {
	info, _ := debug.ReadBuildInfo()
	return resolve(version, info)
}

func resolve(set string, info *debug.BuildInfo) string {
	switch {
	case set != "" && set != "dev":
		return set
	case info != nil && info.Main.Version != "" && info.Main.Version != "(devel)":
		return info.Main.Version
	}
	return "dev"
}

// versionLine is what --version prints after the program's name: the version, with the commit
// it was built from and the Go version when Go recorded them.
func versionLine() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return Version()
	}
	return describe(resolve(version, info), info)
}

func describe(v string, info *debug.BuildInfo) string {
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

// LogLevel registers --log-level on fs (debug, info, warn or error; RUNFLEET_LOG_LEVEL like every
// flag) and returns the logger maker that follows it: JSON lines on w at that level.
func LogLevel(fs *flag.FlagSet) func(w io.Writer) *slog.Logger {
	level := new(slog.Level)
	fs.TextVar(level, "log-level", slog.LevelInfo, "least level logged: debug, info (one line per job, at its settlement), warn or error")
	return func(w io.Writer) *slog.Logger {
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
	}
}
