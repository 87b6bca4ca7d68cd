package gateway_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/gateway"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
)

type judge0Answer struct {
	Token         string
	Stdout        *string
	Stderr        *string
	CompileOutput *string `json:"compile_output"`
	ExitCode      *int    `json:"exit_code"`
	Status        struct {
		ID          int
		Description string
	}
	Time   *string
	Memory *int64
}

// TestJudge0: judge0's clients list the language ids the workers answer to, submit by id and
// read judge0's statuses: accepted, wrong answer against expected_output, a non-zero exit, a
// compile error, base64 both ways; a submission not waited for is read by its token.
func TestJudge0(t *testing.T) {
	f := newFleet(t, gateway.Options{})
	f.startWorker("--langs", "../../langs")
	f.waitAnnounced("python3")

	code, b := f.do("GET", "/languages", apiKey, nil)
	var langs []struct {
		ID   int
		Name string
	}
	if err := json.Unmarshal(b, &langs); err != nil || code != http.StatusOK {
		t.Fatalf("GET /languages = %d %s", code, b)
	}
	ids := map[int]bool{}
	for _, l := range langs {
		ids[l.ID] = true
	}
	if !ids[46] || !ids[71] || !ids[63] {
		t.Fatalf("languages = %s, want bash 46, python 71 and javascript 63 at least", b)
	}
	submit := func(t *testing.T, query, body string) (int, judge0Answer) {
		t.Helper()
		code, b := f.do("POST", "/submissions"+query, apiKey, []byte(body), "Content-Type", "application/json")
		var a judge0Answer
		if err := json.Unmarshal(b, &a); err != nil {
			t.Fatalf("POST /submissions = %d %s: not JSON", code, b)
		}
		return code, a
	}
	cases := []struct {
		name, body string
		status     int
		stdout     string
	}{
		{name: "accepted", body: `{"language_id":46,"source_code":"read -r n; echo OK $n","stdin":"x\n","expected_output":"OK x"}`, status: 3, stdout: "OK x\n"},
		{name: "wrong answer", body: `{"language_id":71,"source_code":"print('KO')","expected_output":"OK\n"}`, status: 4, stdout: "KO\n"},
		{name: "runtime error", body: `{"language_id":46,"source_code":"exit 3"}`, status: 11},
	}
	if ids[50] {
		cases = append(cases, struct {
			name, body string
			status     int
			stdout     string
		}{name: "compile error", body: `{"language_id":50,"source_code":"int main(void) { return undeclared; }"}`, status: 6})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, a := submit(t, "?wait=true", c.body)
			if code != http.StatusCreated || a.Status.ID != c.status || (c.stdout != "" && (a.Stdout == nil || *a.Stdout != c.stdout)) || a.Time == nil {
				t.Errorf("POST /submissions?wait=true = %d %+v, want 201, status %d, stdout %q and a time", code, a, c.status, c.stdout)
			}
			if c.status == 6 && (a.CompileOutput == nil || !strings.Contains(*a.CompileOutput, "undeclared")) {
				t.Errorf("compile_output = %v, want the compiler's message", a.CompileOutput)
			}
		})
	}
	t.Run("base64", func(t *testing.T) {
		enc := base64.StdEncoding.EncodeToString
		code, a := submit(t, "?wait=true&base64_encoded=true", `{"language_id":46,"source_code":"`+enc([]byte("cat"))+`","stdin":"`+enc([]byte("héllo"))+`"}`)
		if code != http.StatusCreated || a.Status.ID != 3 || a.Stdout == nil || *a.Stdout != enc([]byte("héllo")) {
			t.Errorf("POST /submissions base64 = %d %+v, want the stdout base64", code, a)
		}
	})
	t.Run("token", func(t *testing.T) {
		code, a := submit(t, "", `{"language_id":46,"source_code":"echo later"}`)
		if code != http.StatusCreated || a.Token == "" {
			t.Fatalf("POST /submissions = %d %+v, want 201 with a token", code, a)
		}
		var got judge0Answer
		testenv.WaitFor(t, time.Minute, "the submission settled", func() bool {
			_, b := f.do("GET", "/submissions/"+a.Token, apiKey, nil)
			return json.Unmarshal(b, &got) == nil && got.Status.ID > 2
		})
		if got.Status.ID != 3 || got.Stdout == nil || *got.Stdout != "later\n" {
			t.Errorf("GET /submissions/%s = %+v, want accepted with stdout", a.Token, got)
		}
	})
	t.Run("unknown language", func(t *testing.T) {
		if code, b := f.do("POST", "/submissions?wait=true", apiKey, []byte(`{"language_id":9999,"source_code":"x"}`)); code != http.StatusUnprocessableEntity {
			t.Errorf("POST /submissions language 9999 = %d %s, want 422", code, b)
		}
	})
}
