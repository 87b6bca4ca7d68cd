// Package cli holds what the two programs share at their edge: flags that also read RUNFLEET_*
// environment variables, and one-line errors.
package cli

import (
	"flag"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// EnvName is the variable a flag reads: RUNFLEET_ and the name in upper case, '-' as '_'.
func EnvName(flagName string) string {
	return "RUNFLEET_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Parse parses args into fs, then sets every flag not given on the command line from its
// environment variable, so that a flag on the command line wins.
func Parse(fs *flag.FlagSet, args []string, getenv func(string) string) error {
	return parse(fs, args, getenv, func(string) bool { return true })
}

// ParseEnvOf is Parse where only the flags named in envFlags read the environment: a program's
// connection settings may come from RUNFLEET_*, while what it sends (a job's id or code) never
// does, so a worker's RUNFLEET_ID cannot leak into a job.
func ParseEnvOf(fs *flag.FlagSet, args []string, getenv func(string) string, envFlags ...string) error {
	return parse(fs, args, getenv, func(name string) bool { return slices.Contains(envFlags, name) })
}

func parse(fs *flag.FlagSet, args []string, getenv func(string) string, readsEnv func(string) bool) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
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
	return err
}

// List is a repeatable flag.
type List []string

func (l *List) String() string     { return strings.Join(*l, ",") }
func (l *List) Set(v string) error { *l = append(*l, v); return nil }

// ConnectNATS connects a long-running program (worker, gateway) to NATS: it reconnects forever
// and logs each loss and return of the connection. It fails at once when no server answers, with
// the one line a program exits with.
func ConnectNATS(url, name string, log *slog.Logger) (*nats.Conn, error) {
	nc, err := nats.Connect(url, nats.Name(name), nats.MaxReconnects(-1),
		nats.ReconnectWait(500*time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("nats reconnected", "url", nc.ConnectedUrl()) }))
	if err != nil {
		return nil, fmt.Errorf("nats %s unreachable: %w", url, err)
	}
	return nc, nil
}
