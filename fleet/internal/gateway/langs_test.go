package gateway_test

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/runfleet/runfleet/fleet/internal/gateway"
	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// TestLanguagesThroughAPIs: every shipped language's test program, submitted through the native
// API, piston's and judge0's, on both providers, prints its expected output. It needs the langs
// root fs and image (`make langs-test` sets RUNFLEET_TEST_LANGS=1 and builds them), and a worker
// given either serves them with no --langs flag.
func TestLanguagesThroughAPIs(t *testing.T) {
	if os.Getenv("RUNFLEET_TEST_LANGS") != "1" {
		t.Skip("the langs root fs and image: make langs-test")
	}
	root, err := filepath.Abs(cmp.Or(os.Getenv("RUNFLEET_TEST_LANGS_ROOTFS"), "../../../var/rootfs-langs"))
	if err != nil {
		t.Fatal(err)
	}
	image := cmp.Or(os.Getenv("RUNFLEET_TEST_LANGS_IMAGE"), "runfleet-langs:latest")
	langs, skipped, err := profile.LoadDir("../../langs", profile.Set{}, root, "")
	if err != nil || len(skipped) > 0 {
		testenv.Missing(t, "the langs root fs %s (make langs): skipped %v, %v", root, skipped, err)
	}
	for _, provider := range []string{"namespace", "docker"} {
		t.Run(provider, func(t *testing.T) {
			// The harness gives its workers the suite's root fs: here the langs root fs.
			t.Setenv("RUNFLEET_TEST_ROOTFS", root)
			f := newFleet(t, gateway.Options{})
			// No --langs: the langs root fs and image ship their manifests (make langs).
			f.startWorker("--provider", provider, "--image", image)
			f.waitAnnounced(langs.Names()[0])
			for _, name := range langs.Names() {
				p := langs[name]
				judge0 := 0
				for _, a := range p.Aliases {
					if n, err := strconv.Atoi(a); err == nil {
						judge0 = n
					}
				}
				t.Run(name, func(t *testing.T) {
					native, _ := json.Marshal(job.Request{Language: name, Code: p.Test.Code, Stdin: p.Test.Stdin})
					code, b := f.do("POST", "/v1/jobs?wait=true", apiKey, native, "Content-Type", "application/json")
					var st job.Settlement
					if err := json.Unmarshal(b, &st); err != nil || code != http.StatusOK || st.Status != job.StatusSucceeded || st.StdoutBytes != int64(len(p.Test.Stdout)) {
						t.Errorf("native: %d %s, want succeeded with %d bytes of stdout", code, b, len(p.Test.Stdout))
					}
					body := fmt.Sprintf(`{"language":%q,"version":"*","files":[{"content":%q}],"stdin":%q}`, name, p.Test.Code, p.Test.Stdin)
					code, b = f.do("POST", "/api/v2/execute", apiKey, []byte(body), "Content-Type", "application/json")
					var pa pistonAnswer
					if err := json.Unmarshal(b, &pa); err != nil || code != http.StatusOK || pa.Run == nil || pa.Run.Stdout != p.Test.Stdout {
						t.Errorf("piston: %d %s, want stdout %q", code, b, p.Test.Stdout)
					}
					body = fmt.Sprintf(`{"language_id":%d,"source_code":%q,"stdin":%q,"expected_output":%q}`, judge0, p.Test.Code, p.Test.Stdin, p.Test.Stdout)
					code, b = f.do("POST", "/submissions?wait=true", apiKey, []byte(body), "Content-Type", "application/json")
					var ja judge0Answer
					if err := json.Unmarshal(b, &ja); err != nil || code != http.StatusCreated || ja.Status.ID != 3 {
						t.Errorf("judge0 (id %d): %d %s, want 201 Accepted", judge0, code, b)
					}
				})
			}
		})
	}
}
