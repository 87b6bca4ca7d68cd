package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/cli"
	"github.com/runfleet/runfleet/job"
)

// artifactFlags are submit's --output, --artifacts and --force.
type artifactFlags struct {
	outputs cli.List
	dir     string
	force   bool
}

func (a *artifactFlags) register(fs *flag.FlagSet) {
	fs.Var(&a.outputs, "output", "GLOB: files under /workspace to keep as artifacts, ** included (repeatable)")
	fs.StringVar(&a.dir, "artifacts", "", "directory the artifacts are downloaded into once the job settled, created when missing (default ./<job id>/)")
	a.forceFlag(fs)
}

func (a *artifactFlags) forceFlag(fs *flag.FlagSet) {
	fs.BoolVar(&a.force, "force", false, "replace files that already exist in the artifacts directory")
}

// wanted says whether the command line asks for a download.
func (a *artifactFlags) wanted() bool { return len(a.outputs) > 0 || a.dir != "" }

// after downloads the artifacts of a job that settled, when they were asked for; a failed
// download turns a successful exit into exitOther.
func (a *artifactFlags) after(c *runfleet.Client, id string, code int, stderr io.Writer) int {
	if !a.wanted() {
		return code
	}
	if err := download(c, id, a.dir, a.force, stderr); err != nil {
		fmt.Fprintf(stderr, "submit: artifacts of %s: %v\n", id, err)
		return cmpNonzero(code, exitOther)
	}
	return code
}

func cmpNonzero(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

const artifactsUsage = `usage: submit artifacts ID [DIR] [flags]

Downloads the artifacts of settled job ID into DIR (default ./ID/), created when missing. The job
chose the names: every write stays inside DIR, a .git path is refused, names are printed quoted,
and a file that already exists is never replaced (nothing is downloaded) unless --force.

Flags:
`

// artifactsCommand is `submit artifacts ID [DIR]`.
func artifactsCommand(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var o options
	var a artifactFlags
	fs := cli.NewFlagSet("submit artifacts", artifactsUsage, stdout)
	commonFlags(fs, &o)
	a.forceFlag(fs)
	pos, _, err := cli.ParseInterspersed(fs, args, getenv, connectionFlags...)
	if err != nil {
		return parseFailed(stdout, stderr, err)
	}
	switch {
	case len(pos) < 1 || len(pos) > 2:
		return usageFailed(stderr, errors.New("usage: submit artifacts ID [DIR]"))
	case !job.ValidID(pos[0]):
		return usageFailed(stderr, fmt.Errorf("%q: %w", pos[0], job.ErrInvalidID))
	}
	id, dir := pos[0], pos[0]
	if len(pos) == 2 {
		dir = pos[1]
	}
	c, nc, err := connect(o, stderr)
	if err != nil {
		return fail(stderr, err)
	}
	defer nc.Close()
	if err := download(c, id, dir, a.force, stderr); err != nil {
		return fail(stderr, describe(id, err))
	}
	return 0
}

// download writes every artifact of settled job id under dir, printing each name quoted: the job
// chose it, and it may hold terminal escapes.
func download(c *runfleet.Client, id, dir string, force bool, stderr io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if dir == "" {
		dir = id
	}
	_, err := c.SaveArtifacts(ctx, id, dir, &runfleet.SaveOptions{Overwrite: force, OnSave: func(a job.Artifact) {
		fmt.Fprintf(stderr, "submit: saved %q (%d bytes, sha256 %s)\n", filepath.Join(dir, a.Path), a.Size, a.SHA256)
	}})
	if errors.Is(err, runfleet.ErrArtifactExists) {
		return fmt.Errorf("%w; nothing downloaded (--force replaces it)", err)
	}
	return err
}
