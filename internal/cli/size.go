package cli

import (
	"fmt"
	"strconv"
	"strings"
)

// ByteSize is a flag of a number of bytes: plain, or with a KiB, MiB, GiB or TiB suffix.
type ByteSize int64

var sizeUnits = []struct {
	suffix string
	shift  uint
}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}}

func (b *ByteSize) Set(s string) error {
	num, shift := strings.TrimSpace(s), uint(0)
	for _, u := range sizeUnits {
		if n, ok := strings.CutSuffix(num, u.suffix); ok {
			num, shift = strings.TrimSpace(n), u.shift
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<63-1)>>shift {
		return fmt.Errorf("%q: want bytes, or a number with KiB, MiB, GiB or TiB", s)
	}
	*b = ByteSize(n << shift)
	return nil
}

func (b *ByteSize) String() string {
	for _, u := range sizeUnits {
		if v := int64(*b); v != 0 && u.shift > 0 && v%(1<<u.shift) == 0 {
			return strconv.FormatInt(v>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(*b), 10)
}
