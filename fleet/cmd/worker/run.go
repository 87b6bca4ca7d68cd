package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/runfleet/runfleet/fleet/internal/cli"
	"github.com/runfleet/runfleet/fleet/internal/tracing"
	"github.com/runfleet/runfleet/fleet/internal/worker"
)

// run parses the flags and runs the worker until ctx ends; when kill ends, its running jobs are
// killed rather than given the rest of --grace.
func run(ctx, kill context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs, c := flags(stdout)
	if err := cli.Parse(fs, args, getenv); err != nil {
		return err
	}
	if err := c.validate(); err != nil {
		return err
	}
	// Every line carries the worker's identity once: the runner adds only job keys.
	log := c.logger(stderr).With("worker", c.id)
	redis.SetLogger(redisLog{log})
	shutdown, err := tracing.Setup(ctx, getenv, "runfleet-worker", cli.Version())
	if err != nil {
		return err
	}
	defer flushTraces(shutdown, log)
	return worker.Run(ctx, kill, c.worker(stderr), log)
}

// flushTraces exports the spans still buffered, within a bound of its own: the worker's context
// has ended by then.
func flushTraces(shutdown func(context.Context) error, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		log.Warn("export traces", "err", err)
	}
}

// redisLog keeps go-redis's own lines out of the worker's standard error: they are debug lines of
// the worker's log, and a connection failure is reported once, by the worker.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}
