package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/internal/cli"
	"github.com/runfleet/runfleet/job"
)

// artifactFlags are submit's --output and --artifacts.
type artifactFlags struct {
	outputs cli.List
	dir     string
}

func (a *artifactFlags) register(fs *flag.FlagSet) {
	fs.Var(&a.outputs, "output", "GLOB: files under /workspace to keep as artifacts, ** included (repeatable)")
	fs.StringVar(&a.dir, "artifacts", "", "where to download the artifacts once the job settled (default: the current directory when --output is given)")
}

// after downloads the artifacts of a job that settled, when --output was given; a failed
// download turns a successful exit into exitOther.
func (a *artifactFlags) after(c *runfleet.Client, id string, code int, stderr io.Writer) int {
	if len(a.outputs) == 0 && a.dir == "" {
		return code
	}
	if err := download(c, id, a.dir, stderr); err != nil {
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

// artifactsCommand is `submit artifacts ID [DIR]`.
func artifactsCommand(args []string, getenv func(string) string, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("submit artifacts", flag.ContinueOnError)
	fs.SetOutput(stderr)
	commonFlags(fs, &o)
	if err := cli.ParseEnvOf(fs, args, getenv, connectionFlags...); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return exitOther
	}
	if fs.NArg() < 1 || fs.NArg() > 2 || !job.ValidID(fs.Arg(0)) {
		fmt.Fprintln(stderr, "usage: submit artifacts ID [DIR]")
		return exitOther
	}
	c, nc, err := connect(o)
	if err != nil {
		return fail(stderr, err)
	}
	defer nc.Close()
	if err := download(c, fs.Arg(0), fs.Arg(1), stderr); err != nil {
		return fail(stderr, err)
	}
	return 0
}

// download writes every artifact of settled job id under dir ("" is the current directory).
func download(c *runfleet.Client, id, dir string, stderr io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	arts, err := c.Artifacts(ctx, id)
	if err != nil {
		return err
	}
	if dir == "" {
		dir = "."
	}
	for _, a := range arts {
		if !filepath.IsLocal(a.Path) {
			return fmt.Errorf("artifact path %q is not local", a.Path)
		}
		dst := filepath.Join(dir, filepath.FromSlash(a.Path))
		if err := save(ctx, c, id, a.Path, dst); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "submit: saved %s (%d bytes, sha256 %s)\n", dst, a.Size, a.SHA256)
	}
	return nil
}

func save(ctx context.Context, c *runfleet.Client, id, path, dst string) error {
	r, err := c.OpenArtifact(ctx, id, path)
	if err != nil {
		return err
	}
	defer r.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return fmt.Errorf("download %s: %w", path, err)
	}
	return f.Close()
}
