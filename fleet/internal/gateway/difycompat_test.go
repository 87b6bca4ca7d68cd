package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/gateway"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// Dify's side of /v1/sandbox/run, replayed exactly as langgenius/dify's api/core/helper/
// code_executor builds and reads it: main after the fix of langgenius/dify#26818 (the Jinja2
// transformer embeds the template as base64; Dify 1.10), where code_executor.py posts through a
// pooled httpx client and no longer lists dependencies. The three runner templates are what the
// transformers' get_runner_script returns after textwrap.dedent, the Jinja2 preload what its
// get_preload_script returns.
const (
	difyPython3Runner = `{{code}}

import json
from base64 import b64decode

# decode and prepare input dict
inputs_obj = json.loads(b64decode('{{inputs}}').decode('utf-8'))

# execute main function
output_obj = main(**inputs_obj)

# convert output to json and print
output_json = json.dumps(output_obj, indent=4)
result = f'''<<RESULT>>{output_json}<<RESULT>>'''
print(result)
`
	difyNodeRunner = "{{code}}\n\n" +
		"// decode and prepare input object\n" +
		"var inputs_obj = JSON.parse(Buffer.from('{{inputs}}', 'base64').toString('utf-8'))\n\n" +
		"// execute main function\nvar output_obj = main(inputs_obj)\n\n" +
		"// convert output to json and print\nvar output_json = JSON.stringify(output_obj)\n" +
		"var result = `<<RESULT>>${output_json}<<RESULT>>`\nconsole.log(result)\n"
	difyJinja2Runner = `
import jinja2
import json
from base64 import b64decode

# declare main function
def main(**inputs):
    # Decode base64-encoded template to handle special characters safely
    template_code = b64decode('{{template_b64}}').decode('utf-8')
    template = jinja2.Template(template_code)
    return template.render(**inputs)

# decode and prepare input dict
inputs_obj = json.loads(b64decode('{{inputs}}').decode('utf-8'))

# execute main function
output = main(**inputs_obj)

# convert output and print
result = f'''<<RESULT>>{output}<<RESULT>>'''
print(result)

`
	difyJinja2Preload = `
import jinja2
from base64 import b64decode

def _jinja2_preload_():
    # prepare jinja2 environment, load template and render before to avoid sandbox issue
    template = jinja2.Template('{{s}}')
    template.render(s='a')

if __name__ == '__main__':
    _jinja2_preload_()

`
)

// difyLanguage is code_language_to_running_language: jinja2 runs as python3.
var difyLanguage = map[string]string{"python3": "python3", "jinja2": "python3", "javascript": "nodejs"}

// difyTransform is TemplateTransformer.transform_caller: the runner and the preload. inputsJSON is
// the inputs as Python's json.dumps(ensure_ascii=False) writes them (", " and ": ").
func difyTransform(language, code, inputsJSON string) (runner, preload string) {
	inputs := base64.StdEncoding.EncodeToString([]byte(inputsJSON))
	switch language {
	case "jinja2":
		runner = strings.Replace(difyJinja2Runner, "{{template_b64}}", base64.StdEncoding.EncodeToString([]byte(code)), 1)
		return strings.Replace(runner, "{{inputs}}", inputs, 1), difyJinja2Preload
	case "javascript":
		runner = difyNodeRunner
	default:
		runner = difyPython3Runner
	}
	return strings.Replace(strings.Replace(runner, "{{code}}", code, 1), "{{inputs}}", inputs, 1), ""
}

// difyBodyBytes is the body httpx 0.28 sends for json=data: json.dumps with ensure_ascii=False,
// separators (",", ":"), the keys in the order code_executor.py writes them.
func difyBodyBytes(t *testing.T, language, code, preload string) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	err := enc.Encode(struct {
		Language      string `json:"language"`
		Code          string `json:"code"`
		Preload       string `json:"preload"`
		EnableNetwork bool   `json:"enable_network"`
	}{difyLanguage[language], code, preload, true})
	if err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// errDifyExecution is Dify's CodeExecutionError.
var errDifyExecution = errors.New("CodeExecutionError")

// difyExecute is CodeExecutor.execute_code: its status handling and its reading of the answer.
// readTimeout is Dify's CODE_EXECUTION_READ_TIMEOUT.
func difyExecute(ctx context.Context, endpoint, key string, body []byte, readTimeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", endpoint+"/v1/sandbox/run", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("X-Api-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("%w: Failed to execute code, which is likely a network issue, please check if the sandbox service is running. ( Error: %v )", errDifyExecution, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusServiceUnavailable:
		return "", fmt.Errorf("%w: Code execution service is unavailable", errDifyExecution)
	case resp.StatusCode != http.StatusOK:
		return "", fmt.Errorf("%w: Failed to execute code, got status code %d, please check if the sandbox service is running", errDifyExecution, resp.StatusCode)
	}
	raw, err := io.ReadAll(resp.Body)
	var data struct {
		Code    *int   `json:"code"`
		Message string `json:"message"`
		Data    struct {
			Stdout *string `json:"stdout"`
			Error  *string `json:"error"`
		} `json:"data"`
	}
	if err != nil || json.Unmarshal(raw, &data) != nil {
		return "", fmt.Errorf("%w: Failed to parse response", errDifyExecution)
	}
	if data.Code == nil || *data.Code != 0 {
		return "", fmt.Errorf("%w: Got error code: %v. Got error msg: %s", errDifyExecution, data.Code, data.Message)
	}
	if data.Data.Error != nil && *data.Data.Error != "" {
		return "", fmt.Errorf("%w: %s", errDifyExecution, *data.Data.Error)
	}
	if data.Data.Stdout == nil {
		return "", nil
	}
	return *data.Data.Stdout, nil
}

// difyResultTag is extract_result_str_from_response's pattern: greedy, across lines.
var difyResultTag = regexp.MustCompile(`(?s)<<RESULT>>(.*)<<RESULT>>`)

// difyResponse is transform_response: the tagged JSON object (the Jinja2 transformer: the tagged
// text as "result").
func difyResponse(language, stdout string) (map[string]any, error) {
	m := difyResultTag.FindStringSubmatch(stdout)
	if m == nil {
		return nil, errors.New("Failed to parse result: no result tag found in response")
	}
	if language == "jinja2" {
		return map[string]any{"result": m[1]}, nil
	}
	var out map[string]any
	if err := json.Unmarshal([]byte(m[1]), &out); err != nil {
		return nil, fmt.Errorf("Failed to parse JSON response: %w", err)
	}
	return out, nil
}

// TestDifyReplay replays Dify's code node and Template Transform node against the gateway
// process and a real worker, as Dify sends and reads them.
func TestDifyReplay(t *testing.T) {
	f := newFleet(t, gateway.Options{})
	f.startWorker()
	p := f.startBinary("--max-output", "4MiB", "--timeout", "10s")
	node := func(t *testing.T, language, code, inputsJSON string, readTimeout time.Duration) (map[string]any, error) {
		t.Helper()
		runner, preload := difyTransform(language, code, inputsJSON)
		stdout, err := difyExecute(t.Context(), p.URL, apiKey, difyBodyBytes(t, language, runner, preload), readTimeout)
		if err != nil {
			return nil, err
		}
		return difyResponse(language, stdout)
	}

	for _, tc := range []struct {
		name, language, code, inputs string
		want                         string
	}{
		{"python3", "python3", "def main(arg1: str, arg2: str) -> dict:\n    return {\n        \"result\": arg1 + arg2,\n    }\n",
			`{"arg1": "héllo <", "arg2": "wörld"}`, "héllo <wörld"},
		{"javascript", "javascript", "function main({arg1, arg2}) {\n    return {\n        result: arg1 + arg2\n    }\n}\n",
			`{"arg1": "héllo <", "arg2": "wörld"}`, "héllo <wörld"},
		{"jinja2", "jinja2", "Hello {{ name }}! {% for i in items %}{{ i }},{% endfor %} it's \"quoted\" '''",
			`{"name": "Dify", "items": [1, 2, 3]}`, "Hello Dify! 1,2,3, it's \"quoted\" '''"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := node(t, tc.language, tc.code, tc.inputs, time.Minute)
			if err != nil || out["result"] != tc.want {
				t.Errorf("node = %v, %v; want result %q", out, err, tc.want)
			}
		})
	}

	t.Run("a 3 MB result with --max-output 4MiB", func(t *testing.T) {
		out, err := node(t, "python3", "def main() -> dict:\n    return {'result': 'x' * 3000000}\n", `{}`, time.Minute)
		if err != nil {
			t.Fatalf("node: %v", err)
		}
		if s, _ := out["result"].(string); len(s) != 3_000_000 {
			t.Errorf("result of %d bytes, want 3,000,000", len(s))
		}
	})

	t.Run("an exception is the node's error", func(t *testing.T) {
		_, err := node(t, "python3", "def main() -> dict:\n    raise ValueError('boom')\n", `{}`, time.Minute)
		if !errors.Is(err, errDifyExecution) || !strings.Contains(err.Error(), "ValueError: boom") || !strings.Contains(err.Error(), "Traceback") {
			t.Errorf("node = %v, want a CodeExecutionError with the traceback", err)
		}
	})

	t.Run("a timeout is the node's error", func(t *testing.T) {
		_, err := node(t, "python3", "def main() -> dict:\n    while True:\n        pass\n", `{}`, time.Minute)
		if !errors.Is(err, errDifyExecution) || !strings.Contains(err.Error(), "error: timeout") {
			t.Errorf("node = %v, want a CodeExecutionError error: timeout", err)
		}
	})

	t.Run("Dify gone at its read timeout: the job is cancelled, and a retry runs once", func(t *testing.T) {
		code := "import time\ndef main() -> dict:\n    time.sleep(8)\n    return {'result': 'slept'}\n"
		before := strings.Count(p.log.String(), `"msg":"job cancelled"`)
		_, err := node(t, "python3", code, `{}`, time.Second)
		if !errors.Is(err, errDifyExecution) || !strings.Contains(err.Error(), "network issue") {
			t.Fatalf("node with a 1 s read timeout = %v, want Dify's network-issue error", err)
		}
		// The gateway cancels the job whose client left; it settles cancelled, never succeeded.
		var id string
		testenv.WaitFor(t, time.Minute, "the gateway cancelling the job", func() bool {
			sc := bufio.NewScanner(strings.NewReader(p.log.String()))
			n := 0
			for sc.Scan() {
				var line struct {
					Msg   string
					JobID string `json:"job_id"`
				}
				if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "job cancelled" {
					if n++; n > before {
						id = line.JobID
					}
				}
			}
			return id != ""
		})
		if st := f.settle(id); st.Status != job.StatusCancelled {
			t.Errorf("job %s of the request Dify left: %s, want cancelled", id, st.Status)
		}
		// The node's retry (retry on failure), with time to wait this once.
		out, err := node(t, "python3", code, `{}`, time.Minute)
		if err != nil || out["result"] != "slept" {
			t.Errorf("retried node = %v, %v; want result slept", out, err)
		}
	})
}
