//go:build deploy

package deploy_test

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/runfleet/runfleet/fleet/internal/testenv"
)

// helmCommand is a documented `helm install|upgrade RELEASE CHART …` command, its lines joined.
var helmCommand = regexp.MustCompile(`(?m)^helm (install|upgrade) \S+ fleet/deploy/helm/runfleet((?:[^\n]*\\\n)*[^\n]*)`)

// TestDocumentedHelmCommands renders the chart with the values of every `helm install` and `helm
// upgrade` the README and docs/operations.md show, and decodes it strictly: a documented value the
// chart does not take, or a combination it renders wrongly, fails here, not for the reader.
func TestDocumentedHelmCommands(t *testing.T) {
	if _, err := exec.LookPath("helm"); err != nil {
		testenv.Missing(t, "helm (scripts/setup deploy): %v", err)
	}
	found := 0
	for _, doc := range []string{"../../README.md", "../../docs/operations.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range helmCommand.FindAllStringSubmatch(string(b), -1) {
			found++
			var args []string
			fields := strings.Fields(strings.ReplaceAll(m[2], "\\\n", " "))
			for i := 0; i < len(fields); i++ {
				switch f := fields[i]; f {
				case "--set":
					i++
					args = append(args, "--set", fields[i])
				case "-n", "--namespace", "--reuse-values":
					if f != "--reuse-values" {
						i++
					}
				default:
					t.Fatalf("%s: helm %s takes %q, which this test does not know", doc, m[1], f)
				}
			}
			out, err := exec.Command("helm", append([]string{"template", "runfleet", chartDir, "--namespace", "runfleet"}, args...)...).Output()
			if err != nil {
				t.Fatalf("%s: helm template %s: %v\n%s", doc, strings.Join(args, " "), err, stderrOf(err))
			}
			decodeRendered(t, out)
		}
	}
	if found < 3 {
		t.Fatalf("found %d documented helm commands, want the README's and docs/operations.md's (3 at least)", found)
	}
}
