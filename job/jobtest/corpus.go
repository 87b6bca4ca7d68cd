// Package jobtest holds the corpus of invalid job messages that the decoder's tests, its fuzz
// target and the runner's through-the-queue tests share.
package jobtest

import (
	"strings"

	"github.com/runfleet/runfleet/job"
)

// BadInput is one row of the corpus of invalid job messages: each is rejected with its reason. The runner's
// tests send every row through the real queue as well.
type BadInput struct {
	Name   string
	ID     string // Nats-Msg-Id; "" sends none
	Body   string
	Reason job.Reason
}

func files(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = `{"path":"f` + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + `/` + itoa(i) + `","content":""}`
	}
	return `{"language":"python3","code":"x","files":[` + strings.Join(parts, ",") + `]}`
}

func itoa(i int) string {
	const d = "0123456789"
	if i < 10 {
		return d[i : i+1]
	}
	return itoa(i/10) + d[i%10:i%10+1]
}

// BadInputs returns the corpus; maxBody is the policy's body limit.
func BadInputs(maxBody int) []BadInput {
	ok := func(extra string) string { return `{"language":"python3","code":"print(1)"` + extra + `}` }
	over := ok(`,"stdin":"` + strings.Repeat("a", maxBody) + `"`)
	return []BadInput{
		{"invalid json", "bad-1", `{"language":`, job.ReasonInvalidJSON},
		{"json array", "bad-2", `[1,2,3]`, job.ReasonInvalidJSON},
		{"json string", "bad-3", `"print(1)"`, job.ReasonInvalidJSON},
		{"json number", "bad-4", `42`, job.ReasonInvalidJSON},
		{"json null", "bad-5", `null`, job.ReasonInvalidJSON},
		{"empty body", "bad-6", ``, job.ReasonInvalidJSON},
		{"trailing data", "bad-7", ok("") + `{}`, job.ReasonInvalidJSON},
		{"missing language", "bad-8", `{"code":"print(1)"}`, job.ReasonMissingLanguage},
		{"missing code", "bad-9", `{"language":"python3"}`, job.ReasonMissingCode},
		{"unknown language", "bad-10", `{"language":"cobol","code":"x"}`, job.ReasonUnknownLanguage},
		{"language not a string", "bad-11", `{"language":3,"code":"x"}`, "invalid_language"},
		{"code not a string", "bad-12", `{"language":"python3","code":["x"]}`, "invalid_code"},
		{"stdin not a string", "bad-13", ok(`,"stdin":{}`), job.ReasonInvalidStdin},
		{"env not an object", "bad-14", ok(`,"env":"A=1"`), job.ReasonInvalidEnv},
		{"env value not a string", "bad-15", ok(`,"env":{"A":1}`), job.ReasonInvalidEnv},
		{"env name with =", "bad-16", ok(`,"env":{"A=B":"1"}`), job.ReasonInvalidEnv},
		{"env name with NUL", "bad-17", ok(`,"env":{"A\u0000":"1"}`), job.ReasonInvalidEnv},
		{"env name with digit first", "bad-18", ok(`,"env":{"1A":"1"}`), job.ReasonInvalidEnv},
		{"file path with ..", "bad-19", ok(`,"files":[{"path":"../etc/x","content":""}]`), job.ReasonInvalidPath},
		{"file path absolute", "bad-20", ok(`,"files":[{"path":"/etc/x","content":""}]`), job.ReasonInvalidPath},
		{"file path with NUL", "bad-21", ok(`,"files":[{"path":"a\u0000b","content":""}]`), job.ReasonInvalidPath},
		{"file path empty", "bad-22", ok(`,"files":[{"path":"","content":""}]`), job.ReasonInvalidPath},
		{"file content not base64", "bad-23", ok(`,"files":[{"path":"a","content":"!!"}]`), job.ReasonInvalidFiles},
		{"10000 files", "bad-24", files(10000), job.ReasonInvalidFiles},
		{"files not a list", "bad-25", ok(`,"files":{}`), job.ReasonInvalidFiles},
		{"deadline not a time", "bad-26", ok(`,"deadline":"tomorrow"`), job.ReasonInvalidDeadline},
		{"deadline a number", "bad-27", ok(`,"deadline":17`), job.ReasonInvalidDeadline},
		{"limit as string", "bad-28", ok(`,"limits":{"timeout_ms":"10"}`), job.ReasonInvalidLimits},
		{"limit fractional", "bad-29", ok(`,"limits":{"timeout_ms":1.5}`), job.ReasonInvalidLimits},
		{"limit zero", "bad-30", ok(`,"limits":{"memory_bytes":0}`), job.ReasonInvalidLimits},
		{"limit negative", "bad-31", ok(`,"limits":{"pids":-1}`), job.ReasonInvalidLimits},
		{"limit huge", "bad-32", ok(`,"limits":{"output_bytes":1e300}`), job.ReasonInvalidLimits},
		{"limit above maximum", "bad-33", ok(`,"limits":{"timeout_ms":99999999999}`), job.ReasonInvalidLimits},
		{"limit exponent", "bad-34", ok(`,"limits":{"max_pages":1e2}`), job.ReasonInvalidLimits},
		{"limits not an object", "bad-35", ok(`,"limits":[]`), job.ReasonInvalidLimits},
		{"duplicate key", "bad-36", `{"language":"python3","code":"print(1)","code":"print(2)"}`, job.ReasonDuplicateKey},
		{"duplicate nested key", "bad-37", ok(`,"env":{"A":"1","A":"2"}`), job.ReasonDuplicateKey},
		{"deeply nested", "bad-38", ok(`,"labels":` + strings.Repeat("[", 100) + strings.Repeat("]", 100)), job.ReasonTooDeep},
		{"not utf-8", "bad-39", "{\"language\":\"python3\",\"code\":\"\xff\xfe\"}", job.ReasonInvalidJSON},
		{"id mismatch", "bad-40", ok(`,"id":"other"`), job.ReasonIDMismatch},
		{"body over the limit", "bad-41", over, job.ReasonPayloadTooLarge},
		{"labels not strings", "bad-42", ok(`,"labels":{"a":1}`), job.ReasonInvalidLabels},
		{"code with NUL", "bad-43", `{"language":"python3","code":"a\u0000"}`, job.ReasonInvalidCode},
		{"file mode with setuid", "bad-44", ok(`,"files":[{"path":"a","content":"","mode":2541}]`), job.ReasonInvalidFiles},
		{"same file twice", "bad-45", ok(`,"files":[{"path":"a","content":""},{"path":"./a","content":""}]`), job.ReasonInvalidPath},
		{"17 labels", "bad-46", ok(`,"labels":{` + labels(17) + `}`), job.ReasonInvalidLabels},
		{"label name upper case", "bad-47", ok(`,"labels":{"Tenant":"a"}`), job.ReasonInvalidLabels},
		{"label name of 64 bytes", "bad-48", ok(`,"labels":{"` + strings.Repeat("k", 64) + `":"a"}`), job.ReasonInvalidLabels},
		{"label value of 257 bytes", "bad-49", ok(`,"labels":{"k":"` + strings.Repeat("v", 257) + `"}`), job.ReasonInvalidLabels},
		{"memory below the minimum", "bad-50", ok(`,"limits":{"memory_bytes":1}`), job.ReasonInvalidLimits},
		{"pids below the minimum", "bad-51", ok(`,"limits":{"pids":2}`), job.ReasonInvalidLimits},
		{"artifact limit zero", "bad-52", ok(`,"limits":{"artifact_files":0}`), job.ReasonInvalidLimits},
		{"timeout past a duration", "bad-53", ok(`,"limits":{"timeout_ms":9223372036854775807}`), job.ReasonInvalidLimits},
		{"args not strings", "bad-64", ok(`,"args":[1]`), job.ReasonInvalidArgs},
		{"arg with NUL", "bad-65", ok(`,"args":["a\u0000"]`), job.ReasonInvalidArgs},
		{"limits null member", "bad-54", ok(`,"limits":{"pids":null,"timeout_ms":-5}`), job.ReasonInvalidLimits},
		{"output pattern absolute", "bad-55", ok(`,"outputs":["/etc/passwd"]`), job.ReasonInvalidOutputs},
		{"output pattern with ..", "bad-56", ok(`,"outputs":["out/../../x"]`), job.ReasonInvalidOutputs},
		{"output pattern malformed", "bad-57", ok(`,"outputs":["out/[a-"]`), job.ReasonInvalidOutputs},
		{"output pattern with NUL", "bad-58", ok(`,"outputs":["a\u0000b"]`), job.ReasonInvalidOutputs},
		{"output pattern empty", "bad-59", ok(`,"outputs":[""]`), job.ReasonInvalidOutputs},
		{"17 output patterns", "bad-60", ok(`,"outputs":[` + strings.Repeat(`"a",`, 16) + `"a"]`), job.ReasonInvalidOutputs},
		{"outputs not a list", "bad-61", ok(`,"outputs":"out/*"`), job.ReasonInvalidOutputs},
		{"output pattern not a string", "bad-62", ok(`,"outputs":[1]`), job.ReasonInvalidOutputs},
		{"artifact bytes above maximum", "bad-63", ok(`,"limits":{"artifact_bytes":268435457}`), job.ReasonInvalidLimits},
	}
}

// UnreadableIDs are values (or none) that cannot name a job.
var UnreadableIDs = []struct {
	Name, ID string
}{
	{"no id", ""},
	{"id with dot", "a.b"},
	{"id with star", "a*"},
	{"id with gt", "a>"},
	{"id with space", "a b"},
	{"id of 200 characters", strings.Repeat("a", 200)},
}

// UnreadableJobs are job messages on the default queue that no settlement subject can name: a
// tenant or id token that does not parse, or a Nats-Msg-Id naming another id than the subject's.
// Such messages are recorded on the rejected subject instead of settled.
var UnreadableJobs = []struct {
	Name, Tenant, ID, MsgID string
}{
	{"id with star", "default", "a*", ""},
	{"id with gt", "default", "a>", ""},
	{"id starting with a dash", "default", "-a", ""},
	{"id of 200 characters", "default", strings.Repeat("a", 200), ""},
	{"tenant in capitals", "ACME", "unread-1", ""},
	{"tenant of 65 characters", strings.Repeat("t", 65), "unread-2", ""},
	{"Nats-Msg-Id of another id", "default", "unread-3", "other"},
}

// labels returns n distinct valid label pairs.
func labels(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = `"k` + itoa(i) + `":"v"`
	}
	return strings.Join(parts, ",")
}
