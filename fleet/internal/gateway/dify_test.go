package gateway_test

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/gateway"
	"github.com/runfleet/runfleet/fleet/internal/pydist"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
)

// The runner templates of Dify's code node, as Dify's API wraps a node's code before it posts it
// to CODE_EXECUTION_ENDPOINT/v1/sandbox/run (langgenius/dify, api/core/helper/code_executor/
// python3/python3_transformer.py and javascript/javascript_transformer.py): the user's main, the
// inputs as base64 JSON, and the result printed between <<RESULT>> markers, which Dify cuts out of
// data.stdout.
const (
	difyPython = `# declare main function
{{code}}

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
	difyNode = "// declare main function\n{{code}}\n\n" +
		"// decode and prepare input object\n" +
		"var inputs_obj = JSON.parse(Buffer.from('{{inputs}}', 'base64').toString('utf-8'))\n\n" +
		"// execute main function\nvar output_obj = main(inputs_obj)\n\n" +
		"// convert output to json and print\nvar output_json = JSON.stringify(output_obj)\n" +
		"var result = `<<RESULT>>${output_json}<<RESULT>>`\nconsole.log(result)\n"
)

// difyBody is the body Dify's code executor posts: language, the wrapped code, the template's
// preload (empty for both), and enable_network true.
func difyBody(t *testing.T, language, template, code string, inputs map[string]any) []byte {
	t.Helper()
	in, err := json.Marshal(inputs)
	if err != nil {
		t.Fatal(err)
	}
	wrapped := strings.Replace(template, "{{code}}", code, 1)
	wrapped = strings.Replace(wrapped, "{{inputs}}", base64.StdEncoding.EncodeToString(in), 1)
	b, err := json.Marshal(map[string]any{"language": language, "code": wrapped, "preload": "", "enable_network": true})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sandboxAnswer is what Dify reads from dify-sandbox.
type sandboxAnswer struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    *struct {
		Stdout   string `json:"stdout"`
		Stderr   string `json:"stderr"`
		Error    string `json:"error"`
		ExitCode *int   `json:"exit_code"`
	} `json:"data"`
}

var difyResult = regexp.MustCompile(`(?s)<<RESULT>>(.*?)<<RESULT>>`)

func TestDify(t *testing.T) {
	f := newFleet(t, gateway.Options{RunTimeout: 2 * time.Second, Dependencies: map[string][]gateway.Dependency{
		"python3": {{Name: "numpy", Version: "1.24.2"}}}})
	// With no worker serving, the dependencies are the gateway's own list.
	want := `{"code":0,"message":"success","data":{"dependencies":[{"name":"numpy","version":"1.24.2"}]}}` + "\n"
	if code, b := f.do("GET", "/v1/sandbox/dependencies?language=python3", apiKey, nil); code != http.StatusOK || string(b) != want {
		t.Errorf("dependencies with no worker = %d %s, want 200 %s", code, b, want)
	}
	f.startWorker()
	run := func(t *testing.T, body []byte) (int, sandboxAnswer) {
		t.Helper()
		code, b := f.do("POST", "/v1/sandbox/run", apiKey, body, "Content-Type", "application/json")
		var a sandboxAnswer
		if err := json.Unmarshal(b, &a); err != nil {
			t.Fatalf("POST /v1/sandbox/run = %d %q: not JSON", code, b)
		}
		return code, a
	}

	for _, tc := range []struct{ name, language, template, code string }{
		{"python3 node", "python3", difyPython, "def main(arg1: str, arg2: str) -> dict:\n    return {\n        \"result\": arg1 + arg2,\n    }\n"},
		{"nodejs node", "nodejs", difyNode, "function main({arg1, arg2}) {\n    return {\n        result: arg1 + arg2\n    }\n}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, a := run(t, difyBody(t, tc.language, tc.template, tc.code, map[string]any{"arg1": "héllo ", "arg2": "wörld"}))
			if code != http.StatusOK || a.Code != 0 || a.Message != "success" || a.Data == nil || a.Data.Error != "" {
				t.Fatalf("answer = %d %+v %+v, want 200 code 0 success, no error", code, a, a.Data)
			}
			m := difyResult.FindStringSubmatch(a.Data.Stdout)
			var result map[string]any
			if m == nil || json.Unmarshal([]byte(m[1]), &result) != nil || result["result"] != "héllo wörld" {
				t.Errorf("stdout = %q, want <<RESULT>>{\"result\": \"héllo wörld\"}<<RESULT>>", a.Data.Stdout)
			}
			if a.Data.ExitCode == nil || *a.Data.ExitCode != 0 {
				t.Errorf("exit_code = %v, want 0", a.Data.ExitCode)
			}
		})
	}

	t.Run("failures set data.error", func(t *testing.T) {
		for _, tc := range []struct {
			name, code, want string
		}{
			{"exception", "def main() -> dict:\n    return {'x': 1/0}\n", "ZeroDivisionError"},
			{"timeout", "def main() -> dict:\n    while True: pass\n", "error: timeout"},
			{"exit", "import sys\ndef main() -> dict:\n    sys.exit(4)\n", "exit status 4"},
		} {
			code, a := run(t, difyBody(t, "python3", difyPython, tc.code, map[string]any{}))
			if code != http.StatusOK || a.Code != 0 || a.Data == nil || !strings.Contains(a.Data.Error, tc.want) {
				t.Errorf("%s: %d %+v %+v, want 200 code 0 and data.error with %q", tc.name, code, a, a.Data, tc.want)
			}
		}
	})

	t.Run("enable_network grants no network", func(t *testing.T) {
		host := strings.TrimPrefix(f.nats.URL, "nats://")
		h, p, _ := strings.Cut(host, ":")
		code := "import socket\ndef main() -> dict:\n    try:\n        socket.create_connection(('" + h + "', " + p + "), timeout=2)\n        return {'net': 'reached'}\n    except OSError as e:\n        return {'net': 'none'}\n"
		_, a := run(t, difyBody(t, "python3", difyPython, code, map[string]any{}))
		if a.Data == nil || !strings.Contains(a.Data.Stdout, `"net": "none"`) {
			t.Errorf("a sandbox reached %s: %+v", host, a.Data)
		}
	})

	t.Run("rejected requests", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			body   string
			status int
		}{
			// As dify-sandbox answers a body sent as application/json, as Dify sends it: gin's
			// BindJSON writes 400 for a body it cannot bind.
			{"unsupported language", `{"language":"ruby","code":"puts 1","preload":"","enable_network":true}`, http.StatusBadRequest},
			{"no code", `{"language":"python3","preload":""}`, http.StatusBadRequest},
			{"not JSON", `{"language":`, http.StatusBadRequest},
			{"language not a string", `{"language":3,"code":"print(1)"}`, http.StatusBadRequest},
			{"code with NUL", `{"language":"python3","code":"a\u0000"}`, http.StatusOK},
			{"body too large", `{"language":"python3","code":"` + strings.Repeat("#", 1000001) + `"}`, http.StatusBadRequest},
		} {
			code, a := run(t, []byte(tc.body))
			if code != tc.status || a.Code != -400 || a.Message == "" || a.Data != nil {
				t.Errorf("%s: %d %+v, want %d with code -400, a message and data null", tc.name, code, a, tc.status)
			}
		}
		// Another content type binds as a form there: 200 with code -400.
		if code, b := f.do("POST", "/v1/sandbox/run", apiKey, []byte(`{"language":`), "Content-Type", "text/plain"); code != http.StatusOK || !bytes.Contains(b, []byte(`"code":-400`)) {
			t.Errorf("not JSON as text/plain: %d %s, want 200 with code -400", code, b)
		}
	})

	t.Run("dependencies", func(t *testing.T) {
		// A serving worker announces its python3's packages, those of its root fs: they win.
		deps, err := pydist.Read(cmp.Or(testenv.RootFS(t), "/"))
		if err != nil {
			t.Fatal(err)
		}
		code, b := f.do("GET", "/v1/sandbox/dependencies?language=python3", apiKey, nil)
		var got struct {
			Code int `json:"code"`
			Data struct {
				Dependencies []pydist.Package `json:"dependencies"`
			} `json:"data"`
		}
		if err := json.Unmarshal(b, &got); err != nil || code != http.StatusOK || got.Code != 0 || !slices.Equal(got.Data.Dependencies, deps) {
			t.Errorf("dependencies = %d %s, want 200 code 0 and the worker's root fs's %v", code, b, deps)
		}
		if code, b := f.do("GET", "/v1/sandbox/dependencies?language=nodejs", apiKey, nil); code != http.StatusBadRequest || !bytes.Contains(b, []byte(`"code":-400`)) {
			t.Errorf("nodejs dependencies = %d %s, want 400 code -400", code, b)
		}
	})

	t.Run("health", func(t *testing.T) {
		if code, b := f.do("GET", "/health", "", nil); code != http.StatusOK || string(b) != "\"ok\"\n" {
			t.Errorf("GET /health = %d %q, want 200 \"ok\"", code, b)
		}
	})
}

func TestParseDependencies(t *testing.T) {
	deps, err := gateway.ParseDependencies(strings.NewReader("# pip freeze\nnumpy==1.24.2\n\npandas == 1.5.3\n"))
	if err != nil || len(deps) != 2 || deps[1] != (gateway.Dependency{Name: "pandas", Version: "1.5.3"}) {
		t.Errorf("ParseDependencies = %+v, %v", deps, err)
	}
	if _, err := gateway.ParseDependencies(strings.NewReader("numpy\n")); err == nil {
		t.Error("ParseDependencies(numpy) = nil error, want one")
	}
}
