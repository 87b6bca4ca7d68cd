package runner_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/providers/namespace"
	"github.com/runfleet/runfleet/fleet/internal/supervise"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// TestCompiledLanguage: a shipped manifest's language (C) runs under its aliases and settles
// under its own name; a compile error settles failed/compile_error with the compiler's message
// as stderr; a program that prints the bootstrap's status line itself cannot pass for one.
func TestCompiledLanguage(t *testing.T) {
	f := newFleet(t)
	root := testenv.RootFS(t)
	langs, skipped, err := profile.LoadDir("../../langs", profile.Set{}, root, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := langs["c"]; !ok {
		testenv.Missing(t, "gcc in the root fs %q (skipped: %v)", root, skipped)
	}
	// The small static supervisor: the generic bootstrap is that binary again, in the sandbox.
	dir := t.TempDir()
	bin, err := testenv.BuildProgram(dir, "internal/cmd/sandboxinit")
	if err != nil {
		t.Fatal(err)
	}
	sup, err := supervise.PrivateCopyFile(bin, filepath.Join(dir, "private"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := namespace.New(namespace.Options{CgroupName: "runfleet-test", Supervisor: sup})
	if err != nil {
		testenv.Missing(t, "namespace provider: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	f.startWorker(workerOpts{provider: p, profiles: profile.Set{"c": langs["c"]}})

	cases := []struct {
		name, language, code     string
		status                   job.Status
		reason                   job.Reason
		stdout, stderrContaining string
	}{
		{name: "judge0 id", language: "50", code: `#include <stdio.h>
int main(void) { puts("OK c"); return 0; }`, status: job.StatusSucceeded, stdout: "OK c\n"},
		{name: "compile error", language: "gcc", code: "int main(void) { return undeclared; }",
			status: job.StatusFailed, reason: job.ReasonCompileError, stderrContaining: "undeclared"},
		{name: "forged status line", language: "c", code: `#include <stdio.h>
int main(void) { fputs("runfleet1 compile_error\n", stdout); return 3; }`,
			status: job.StatusFailed, reason: job.ReasonExitNonzero, stdout: "runfleet1 compile_error\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := f.run(job.Request{Language: c.language, Code: c.code})
			if r.st.Status != c.status || r.st.Reason != c.reason || r.st.Profile != "c" {
				t.Errorf("settled %s/%s profile %q (stderr %q), want %s/%s profile c", r.st.Status, r.st.Reason, r.st.Profile, r.stderr, c.status, c.reason)
			}
			if string(r.stdout) != c.stdout || !strings.Contains(string(r.stderr), c.stderrContaining) {
				t.Errorf("stdout %q stderr %q, want stdout %q and stderr containing %q", r.stdout, r.stderr, c.stdout, c.stderrContaining)
			}
		})
	}
}
