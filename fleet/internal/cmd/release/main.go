// Command release releases the repository's two modules in lockstep (`make release
// VERSION=vX.Y.Z`, run at the repository's root on a clean tree): it rewrites the requirements
// between the modules and their go.sum hashes, checks that each nested module loads outside the
// workspace from a module proxy of the tree, commits, and tags vX.Y.Z and fleet/vX.Y.Z.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"

	"github.com/runfleet/runfleet/fleet/internal/release"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "release: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tag := fs.Bool("tag", true, "tag the release commit (false: commit only, to tag later)")
	proxy := fs.String("proxy", "", "only write a module proxy of the tree, at the version its go.mod files name, to `DIR`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *proxy != "" && fs.NArg() == 0 {
		return writeProxy(*proxy, stdout)
	}
	if fs.NArg() != 1 {
		return errors.New("usage: release [--tag=false] vX.Y.Z | release --proxy DIR")
	}
	version := fs.Arg(0)
	if err := release.CheckVersion(version); err != nil {
		return err
	}
	if out, err := git(ctx, "status", "--porcelain"); err != nil {
		return err
	} else if out != "" {
		return fmt.Errorf("the working tree has changes; commit them first:\n%s", out)
	}
	for _, m := range release.Modules {
		if _, err := git(ctx, "rev-parse", "-q", "--verify", "refs/tags/"+m.Tag(version)); err == nil {
			return fmt.Errorf("tag %s exists", m.Tag(version))
		}
	}

	if err := release.SetVersion(".", version); err != nil {
		return errors.Join(err, restore(ctx))
	}
	if err := check(ctx, version, stderr); err != nil {
		return errors.Join(err, restore(ctx))
	}
	files := []string{"go.work"}
	for _, m := range release.Modules {
		files = append(files, filepath.Join(m.Dir, "go.mod"), filepath.Join(m.Dir, "go.sum"))
	}
	if out, err := git(ctx, append([]string{"status", "--porcelain", "--"}, files...)...); err != nil {
		return err
	} else if out != "" {
		msg := fmt.Sprintf("release %s: the modules require each other at %s, with their hashes", version, version)
		if _, err := git(ctx, append([]string{"commit", "-q", "-m", msg, "--"}, files...)...); err != nil {
			return err
		}
	}
	if !*tag {
		fmt.Fprintf(stdout, "committed %s; tag it with `make release VERSION=%s`\n", version, version)
		return nil
	}
	var tags []string
	for _, m := range release.Modules {
		if _, err := git(ctx, "tag", "-a", "-m", m.Path+" "+version, m.Tag(version)); err != nil {
			return err
		}
		tags = append(tags, m.Tag(version))
	}
	fmt.Fprintf(stdout, "tagged %s; publish with `git push origin HEAD %s`\n", strings.Join(tags, " "), strings.Join(tags, " "))
	return nil
}

// writeProxy writes a module proxy of the tree to dir and says how to install from it.
func writeProxy(dir string, stdout io.Writer) error {
	version, err := release.Version(".")
	if err != nil {
		return err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return err
	}
	if err := release.WriteProxy(".", dir, version); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "GOPROXY=file://%s,$(go env GOPROXY) GONOSUMDB=%s go install %s/fleet/cmd/worker@%s\n",
		dir, release.Root, release.Root, version)
	return nil
}

// check loads every package of each nested module, tests included, as the main module outside
// the workspace with its siblings from a module proxy of the tree: the go command then checks each
// sibling's zip against the go.sum that SetVersion wrote, and that the go.sum misses nothing.
func check(ctx context.Context, version string, stderr io.Writer) error {
	tmp, err := os.MkdirTemp("", "runfleet-release-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	proxy, cache := filepath.Join(tmp, "proxy"), filepath.Join(tmp, "modcache")
	if err := release.WriteProxy(".", proxy, version); err != nil {
		return err
	}
	env, err := release.GoEnv(ctx, proxy, cache)
	if err != nil {
		return err
	}
	// The go.sum files are complete: nothing may be added to them.
	env = append(env, "GOFLAGS=-mod=readonly -modcacherw")
	for _, m := range release.Modules[1:] {
		fmt.Fprintf(stderr, "release: go list -deps -test ./... in %s, outside the workspace\n", m.Dir)
		cmd := exec.CommandContext(ctx, "go", "list", "-deps", "-test", "./...")
		cmd.Dir = m.Dir
		cmd.Env = env
		var out bytes.Buffer
		cmd.Stderr = &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go list -deps -test ./... in %s: %w\n%s", m.Dir, err, out.Bytes())
		}
	}
	return nil
}

// restore puts back the files a failed release rewrote (the tree was clean).
func restore(ctx context.Context) error {
	_, err := git(ctx, "checkout", "--", ".")
	return err
}

func git(ctx context.Context, args ...string) (string, error) {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return strings.TrimSpace(string(out)), nil
}
