package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/runfleet/runfleet/fleet/internal/tenant"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

const queueUsage = `usage: submit queue add NAME [--tenants T1,T2] [flags]
       submit queue list [--json] [flags]
       submit queue remove NAME [flags]

The fleet's declared queues, kept in the tenants bucket under _queues (docs/protocol.md,
"Declared queues"): which queues exist and which tenants may use each. Once one queue is declared,
a job on any other queue (default excepted) is refused where it enters and rejected unknown_queue
by the worker that claims it; before that, every queue a worker serves is open to every tenant.
add declares NAME (again: its tenants are replaced), for every tenant unless --tenants names
them; remove ends NAME's declaration (its stored jobs are then rejected when claimed).
Each subcommand answers --help with its own flags.
`

// queueCommand is `submit queue ...`; global are the flags given before `queue`.
func queueCommand(global, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	switch {
	case len(args) > 0 && args[0] == "add":
		return queueAdd(slices.Concat(global, args[1:]), getenv, stdout, stderr)
	case len(args) > 0 && args[0] == "list":
		return queueList(slices.Concat(global, args[1:]), getenv, stdout, stderr)
	case len(args) > 0 && args[0] == "remove":
		return queueRemove(slices.Concat(global, args[1:]), getenv, stdout, stderr)
	case len(args) > 0 && (args[0] == "--help" || args[0] == "-help" || args[0] == "-h"):
		fmt.Fprint(stdout, queueUsage)
		return 0
	}
	return usageFailed(stderr, errors.New("submit queue: want add, list or remove"))
}

const queueAddUsage = `usage: submit queue add NAME [--tenants T1,T2] [flags]

Declares queue NAME, for the tenants --tenants names (comma-separated), else for every tenant;
a queue declared before gets the tenants given now. The bucket is made when it is missing.
Gateways, clients and workers apply it within 5 s.

Flags:
`

// queueAdd is `submit queue add NAME`.
func queueAdd(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var (
		name, tenants string
		d             protocol.QueueDeclaration
	)
	return bucketCommand{name: "submit queue add", usage: queueAddUsage, create: true,
		flags: func(fs *flag.FlagSet, _ *options) {
			fs.StringVar(&tenants, "tenants", "", "the tenants that may use the queue, comma-separated (default: every tenant)")
		},
		check: func(_ *flag.FlagSet, _ options, pos []string) (err error) {
			if name, err = queueName(pos, "submit queue add NAME [--tenants T1,T2]"); err != nil || tenants == "" {
				return err
			}
			for _, t := range strings.Split(tenants, ",") {
				if t = strings.TrimSpace(t); !job.ValidTenant(t) {
					return fmt.Errorf("--tenants: tenant %q: %w", t, job.ErrInvalidTenant)
				}
				if !slices.Contains(d.Tenants, t) {
					d.Tenants = append(d.Tenants, t)
				}
			}
			slices.Sort(d.Tenants)
			return nil
		},
		do: func(ctx context.Context, b bucket, _ options, stdout, _ io.Writer) error {
			if _, err := tenant.UpdateQueues(ctx, b.kv, func(q *protocol.Queues) error {
				q.Queues[name] = d
				return nil
			}); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "queue %s declared for %s\n", name, tenantsOf(d))
			return nil
		},
	}.run(args, getenv, stdout, stderr)
}

const queueListUsage = `usage: submit queue list [--json] [flags]

Prints the declared queues, sorted, each with the tenants that may use it ("*": every tenant);
--json prints one JSON object a line ({"queue","tenants"}). While none is declared it prints
nothing and says so on standard error: every queue a worker serves is then open.

Flags:
`

// queueRow is a line of submit queue list --json.
type queueRow struct {
	Queue   string   `json:"queue"`
	Tenants []string `json:"tenants"` // empty: every tenant
}

// queueList is `submit queue list`.
func queueList(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	return bucketCommand{name: "submit queue list", usage: queueListUsage,
		flags: func(fs *flag.FlagSet, o *options) {
			fs.BoolVar(&o.json, "json", false, "print NDJSON, one queue a line")
		},
		check: func(_ *flag.FlagSet, _ options, pos []string) error {
			if len(pos) != 0 {
				return errors.New("usage: submit queue list [--json]")
			}
			return nil
		},
		do: func(ctx context.Context, b bucket, o options, stdout, stderr io.Writer) error {
			var q protocol.Queues
			ok := false
			if b.kv != nil {
				var err error
				if q, ok, err = tenant.Queues(ctx, b.kv); err != nil {
					return err
				}
			}
			if !ok {
				fmt.Fprintln(stderr, "submit: no queue is declared: every queue a worker serves is open to every tenant")
				return nil
			}
			names := slices.Collect(maps.Keys(q.Queues))
			if _, ok := q.Queues[job.DefaultQueue]; !ok { // always declared
				names = append(names, job.DefaultQueue)
			}
			slices.Sort(names)
			if o.json {
				enc := json.NewEncoder(stdout)
				for _, n := range names {
					row := queueRow{Queue: n, Tenants: q.Queues[n].Tenants}
					if row.Tenants == nil {
						row.Tenants = []string{} // every tenant: [] rather than null
					}
					if err := enc.Encode(row); err != nil {
						return err
					}
				}
				return nil
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "QUEUE\tTENANTS")
			for _, n := range names {
				t := "*"
				if d := q.Queues[n]; len(d.Tenants) > 0 {
					t = strings.Join(d.Tenants, ",")
				}
				fmt.Fprintf(tw, "%s\t%s\n", n, t)
			}
			return tw.Flush()
		},
	}.run(args, getenv, stdout, stderr)
}

const queueRemoveUsage = `usage: submit queue remove NAME [flags]

Ends queue NAME's declaration: new jobs on it are refused, and those stored are rejected
unknown_queue when a worker claims them. Queue default stays declared (for every tenant).

Flags:
`

// queueRemove is `submit queue remove NAME`.
func queueRemove(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var name string
	return bucketCommand{name: "submit queue remove", usage: queueRemoveUsage,
		check: func(_ *flag.FlagSet, _ options, pos []string) (err error) {
			name, err = queueName(pos, "submit queue remove NAME")
			return err
		},
		do: func(ctx context.Context, b bucket, _ options, stdout, _ io.Writer) error {
			errNotDeclared := fmt.Errorf("queue %s is not declared", name)
			if b.kv == nil {
				return errNotDeclared
			}
			if _, err := tenant.UpdateQueues(ctx, b.kv, func(q *protocol.Queues) error {
				if _, ok := q.Queues[name]; !ok {
					return errNotDeclared
				}
				delete(q.Queues, name)
				return nil
			}); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "queue %s removed\n", name)
			return nil
		},
	}.run(args, getenv, stdout, stderr)
}

// queueName is the one positional argument of a queue command, a valid queue name.
func queueName(pos []string, usage string) (string, error) {
	if len(pos) != 1 {
		return "", errors.New("usage: " + usage)
	}
	if !job.ValidQueue(pos[0]) {
		return "", fmt.Errorf("queue %q: %w", pos[0], job.ErrInvalidQueue)
	}
	return pos[0], nil
}

// tenantsOf says which tenants d declares its queue for.
func tenantsOf(d protocol.QueueDeclaration) string {
	if len(d.Tenants) == 0 {
		return "every tenant"
	}
	return "tenants " + strings.Join(d.Tenants, ", ")
}
