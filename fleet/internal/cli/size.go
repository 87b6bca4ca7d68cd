package cli

import (
	"fmt"
	"strconv"
	"strings"
)

// ByteSize is a flag of a number of bytes, read by [ParseSize].
type ByteSize int64

// sizeUnits are the suffixes a size may have: k, m, g and t are KiB, MiB, GiB and TiB, powers of
// 1024 as memory limits are. kB, MB and GB are refused: they are powers of 1000 elsewhere.
var sizeUnits = []struct {
	name, letter string
	shift        uint
}{{"TiB", "t", 40}, {"GiB", "g", 30}, {"MiB", "m", 20}, {"KiB", "k", 10}, {"B", "", 0}}

// SizeSyntax says what [ParseSize] accepts, for errors and usage.
const SizeSyntax = "bytes, or a number with k, m, g or t (KiB, MiB, GiB, TiB: powers of 1024), e.g. 64k, 256m, 256MiB, 1g"

// ParseSize reads a size as every size flag of every program takes it: plain bytes (65536), or a
// whole number with k, m, g or t, or KiB, MiB, GiB or TiB, in any case (64k, 256m, 256MiB, 1g,
// 1GiB). It never returns a negative size.
func ParseSize(s string) (int64, error) {
	num, shift := strings.TrimSpace(s), uint(0)
	lower := strings.ToLower(num)
unit:
	for _, u := range sizeUnits {
		for _, suf := range []string{strings.ToLower(u.name), u.letter} {
			if suf != "" && strings.HasSuffix(lower, suf) {
				num, shift = strings.TrimSpace(num[:len(num)-len(suf)]), u.shift
				break unit
			}
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<63-1)>>shift {
		return 0, fmt.Errorf("%q: want %s", s, SizeSyntax)
	}
	return n << shift, nil
}

func (b *ByteSize) Set(s string) error {
	n, err := ParseSize(s)
	if err != nil {
		return err
	}
	*b = ByteSize(n)
	return nil
}

// String is the size as the flags take it, in the largest unit that divides it: 10GiB, 1536KiB.
func (b *ByteSize) String() string {
	for _, u := range sizeUnits {
		if v := int64(*b); v != 0 && u.shift > 0 && v%(1<<u.shift) == 0 {
			return strconv.FormatInt(v>>u.shift, 10) + u.name
		}
	}
	return strconv.FormatInt(int64(*b), 10)
}
