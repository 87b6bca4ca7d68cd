package job

import (
	"path"
	"strings"
)

// MaxOutputs bounds the patterns of a request's outputs.
const MaxOutputs = 16

// Artifact is a file a job left in /workspace that matched its outputs, stored in the artifacts
// bucket under Object (<job>/<attempt>/<path>).
type Artifact struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	Object string `json:"object"`
}

// ArtifactObject is the object name of the file at path that attempt of job id stored.
func ArtifactObject(id string, attempt int64, path string) string {
	return id + "/" + itoa(attempt) + "/" + path
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
func MatchOutput(pattern, name string) bool {
	return matchParts(strings.Split(path.Clean(pattern), "/"), strings.Split(name, "/"))
}

func matchParts(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(name); i++ {
				if matchParts(pat[1:], name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], name[0]); !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}
