package job

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// TestNamePatternsMatchTheirRegexps: each hand-written pattern accepts exactly what its regular
// expression (the one docs/protocol.md states) accepts, over edge cases and random strings.
func TestNamePatternsMatchTheirRegexps(t *testing.T) {
	alphabet := "aAzZ09_-.:/ \n\x00\xff"
	edge := []string{"", "a", "a\n", "A", "_", "-", "a-", "-a", "a.b", "ä", strings.Repeat("a", 31), strings.Repeat("a", 32),
		strings.Repeat("a", 33), strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a", 65),
		strings.Repeat("a", 127), strings.Repeat("a", 128), strings.Repeat("a", 129)}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := make([]byte, rng.IntN(8))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		edge = append(edge, string(b))
	}
	for name, p := range map[string]namePattern{"prefix": prefixPattern, "queue": queuePattern, "id": idPattern, "env": envName, "label": labelName} {
		re := regexp.MustCompile(p.String())
		for _, s := range edge {
			if got, want := p.MatchString(s), re.MatchString(s); got != want {
				t.Errorf("%s pattern MatchString(%q) = %v, want %v (as %s)", name, s, got, want, re)
			}
		}
	}
}
