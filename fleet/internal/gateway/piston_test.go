package gateway_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/runfleet/runfleet/fleet/internal/gateway"
)

type pistonStage struct {
	Stdout, Stderr, Output string
	Code                   *int
	Signal                 *string
}

type pistonAnswer struct {
	Language, Version, Message string
	Run, Compile               *pistonStage
}

// TestPiston: piston's clients list the runtimes the workers announce and execute programs
// through /api/v2/execute, by piston's language names; a compile error is a compile stage.
func TestPiston(t *testing.T) {
	f := newFleet(t, gateway.Options{})
	f.startWorker("--langs", "../../langs")
	f.waitAnnounced("python3")

	code, b := f.do("GET", "/api/v2/runtimes", apiKey, nil)
	var runtimes []struct {
		Language, Version string
		Aliases           []string
	}
	if err := json.Unmarshal(b, &runtimes); err != nil || code != http.StatusOK {
		t.Fatalf("GET /api/v2/runtimes = %d %s", code, b)
	}
	served := map[string]bool{}
	for _, r := range runtimes {
		served[r.Language] = true
		if slices.ContainsFunc(r.Aliases, func(a string) bool { return strings.Trim(a, "0123456789") == "" }) {
			t.Errorf("runtime %s lists judge0 ids among its aliases: %v", r.Language, r.Aliases)
		}
	}
	if !served["python3"] || !served["bash"] {
		t.Fatalf("runtimes = %s, want python3 and bash at least", b)
	}

	execute := func(t *testing.T, body string) (int, pistonAnswer) {
		t.Helper()
		code, b := f.do("POST", "/api/v2/execute", apiKey, []byte(body), "Content-Type", "application/json")
		var a pistonAnswer
		if err := json.Unmarshal(b, &a); err != nil {
			t.Fatalf("POST /api/v2/execute = %d %s: not JSON", code, b)
		}
		return code, a
	}
	cases := []struct {
		name, body, stdout string
		exit               int
	}{
		{name: "bash", body: `{"language":"bash","version":"*","files":[{"name":"test.sh","content":"read -r n\necho OK $n\nexit 3"}],"stdin":"x\n"}`, stdout: "OK x\n", exit: 3},
		{name: "python by piston's name", body: `{"language":"python","files":[{"content":"import sys\nprint('OK', *sys.argv[1:])"}],"args":["a"]}`, stdout: "OK a\n"},
	}
	if served["c"] {
		cases = append(cases, struct {
			name, body, stdout string
			exit               int
		}{name: "c", body: `{"language":"c","version":"*","files":[{"content":"#include <stdio.h>\nint main(void) { puts(\"OK\"); }"}]}`, stdout: "OK\n"})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, a := execute(t, c.body)
			if code != http.StatusOK || a.Run == nil || a.Compile != nil || a.Run.Stdout != c.stdout || a.Run.Code == nil || *a.Run.Code != c.exit || a.Run.Output != c.stdout+a.Run.Stderr {
				t.Errorf("execute = %d %+v run %+v, want 200, a run stage printing %q with code %d", code, a, a.Run, c.stdout, c.exit)
			}
		})
	}
	t.Run("compile error", func(t *testing.T) {
		if !served["c"] {
			t.Skip("no worker serves c: its root fs lacks gcc")
		}
		code, a := execute(t, `{"language":"gcc","files":[{"content":"int main(void) { return undeclared; }"}]}`)
		if code != http.StatusOK || a.Run != nil || a.Compile == nil || a.Compile.Code == nil || *a.Compile.Code == 0 || !strings.Contains(a.Compile.Stderr, "undeclared") {
			t.Errorf("execute = %d %+v compile %+v, want a compile stage with the compiler's message and no run", code, a, a.Compile)
		}
	})
	t.Run("unknown runtime", func(t *testing.T) {
		code, a := execute(t, `{"language":"cobol","version":"*","files":[{"content":"x"}]}`)
		if code != http.StatusBadRequest || !strings.Contains(a.Message, "runtime is unknown") {
			t.Errorf("execute = %d %+v, want 400 runtime is unknown", code, a)
		}
	})
}
