package main

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// readmeCommand is a line of the README's "In 30 seconds" block that runs bin/submit, with what
// its comment says it prints and how it exits.
var readmeCommand = regexp.MustCompile(`^    (.*bin/submit .*?)\s+# (?:prints (.+?), |[^#]*?, )?exits (\d+)$`)

// TestREADMECommands runs the submit commands of the README's front page, as written, against
// the suite's worker --dev, and checks what each line's comment promises.
func TestREADMECommands(t *testing.T) {
	needWorker(t)
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "## In 30 seconds\n")
	if !ok {
		t.Fatal(`README.md has no "## In 30 seconds" section`)
	}
	block, _, _ = strings.Cut(block, "\n## ")
	dir := t.TempDir()
	if err := os.Mkdir(dir+"/bin", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(submitBin, dir+"/bin/submit"); err != nil {
		t.Fatal(err)
	}
	ran := 0
	for line := range strings.SplitSeq(block, "\n") {
		m := readmeCommand.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		ran++
		t.Run(m[1], func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), "sh", "-c", m[1])
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "RUNFLEET_NATS_URL="+natsURL)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			_ = cmd.Run()
			if want, _ := strconv.Atoi(m[3]); cmd.ProcessState.ExitCode() != want {
				t.Errorf("exit %d, the README says %d (stderr %q)", cmd.ProcessState.ExitCode(), want, stderr.String())
			}
			if m[2] != "" && strings.TrimSpace(stdout.String()) != m[2] {
				t.Errorf("printed %q, the README says %q", stdout.String(), m[2])
			}
		})
	}
	if ran < 3 {
		t.Errorf("ran %d commands of the README's front page, want its submit lines (at least 3)", ran)
	}
}
