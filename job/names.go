package job

// namePattern is the shape of a name (an id, a queue, an env variable): a first byte of one class,
// then bytes of another, up to a length. It matches what its regular expression, re, matches.
// Names are checked by hand rather than with package regexp because every program that imports
// job compiles its patterns at start, the sandbox supervisor (the worker's binary re-executed once
// per sandbox) among them.
type namePattern struct {
	re          string
	first, rest byteClass
	max         int // bytes at most; 0: unbounded
}

func (p namePattern) MatchString(s string) bool {
	if s == "" || (p.max > 0 && len(s) > p.max) || !p.first[s[0]] {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !p.rest[s[i]] {
			return false
		}
	}
	return true
}

func (p namePattern) String() string { return p.re }

// byteClass is the bytes of a bracket expression.
type byteClass [256]bool

// classOf reads spec as the inside of a bracket expression of ranges and single bytes: "a-z0-9_-"
// (a '-' that ends spec is itself).
func classOf(spec string) byteClass {
	var c byteClass
	for i := 0; i < len(spec); i++ {
		if i+2 < len(spec) && spec[i+1] == '-' {
			for b := int(spec[i]); b <= int(spec[i+2]); b++ {
				c[b] = true
			}
			i += 2
			continue
		}
		c[spec[i]] = true
	}
	return c
}
