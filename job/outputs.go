package job

import (
	"path"
	"strings"
)

// MaxOutputs bounds the patterns of a request's outputs.
const MaxOutputs = 16

// Artifact is a file a job left in /workspace that matched its outputs, stored in the artifacts
// bucket under Object (<tenant>/<job>/<attempt>/<path>).
type Artifact struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	Object string `json:"object"`
}

// ArtifactObject is the object name of the file at path that attempt of tenant's job id stored:
// "<tenant>/<job>/<attempt>/<path>".
func ArtifactObject(tenant, id string, attempt int64, path string) string {
	return tenant + "/" + id + "/" + itoa(attempt) + "/" + path
}

func itoa(n int64) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for ; n > 0; n /= 10 {
		i--
		b[i] = byte('0' + n%10)
	}
	return string(b[i:])
}

func checkOutputs(patterns []string) error {
	if len(patterns) > MaxOutputs {
		return reject(ReasonInvalidOutputs, "%d patterns, at most %d", len(patterns), MaxOutputs)
	}
	for _, p := range patterns {
		if err := checkRelative(ReasonInvalidOutputs, "pattern", p); err != nil {
			return err
		}
		for _, part := range strings.Split(p, "/") {
			if _, err := path.Match(part, ""); err != nil {
				return reject(ReasonInvalidOutputs, "%q: %v", clip(p), err)
			}
		}
	}
	return nil
}

// MatchOutput reports whether the slash-separated path name, relative to /workspace, matches
// pattern: path.Match per path element, and an element "**" matches any number of elements,
// none included. A pattern is matched after path.Clean, so "./out/*.png" is "out/*.png".
//
// It takes at most len(pattern elements) × len(name elements) element matches whatever the
// pattern (G11): a pattern comes from an untrusted request and is matched by the worker.
//
// Deprecated: internal to the fleet; will move in the next release.
func MatchOutput(pattern, name string) bool {
	return matchParts(outputParts(pattern), strings.Split(name, "/"))
}

// outputParts is pattern's elements with each run of "**" made one: "**/**" matches what "**"
// does.
func outputParts(pattern string) []string {
	parts := strings.Split(path.Clean(pattern), "/")
	out := parts[:0]
	for _, p := range parts {
		if p == "**" && len(out) > 0 && out[len(out)-1] == "**" {
			continue
		}
		out = append(out, p)
	}
	return out
}

// matchParts matches element by element and, on a mismatch, gives the last "**" seen one more
// element and resumes after it. Only the last "**" needs retrying: whatever an earlier one
// took, the last one can take instead, so no choice is tried twice.
func matchParts(pat, name []string) bool {
	p, n := 0, 0
	star, next := -1, 0 // the last "**" and the first name element not yet given to it
	for n < len(name) {
		switch {
		case p < len(pat) && pat[p] == "**":
			star, next = p, n
			p++
		case p < len(pat) && matchElement(pat[p], name[n]):
			p++
			n++
		case star >= 0:
			next++
			p, n = star+1, next
		default:
			return false
		}
	}
	for p < len(pat) && pat[p] == "**" {
		p++
	}
	return p == len(pat)
}

func matchElement(pattern, name string) bool {
	ok, _ := path.Match(pattern, name)
	return ok
}
