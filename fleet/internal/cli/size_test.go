package cli

import (
	"strings"
	"testing"
)

// TestParseSize: one syntax for every size flag of every program (docs/cli.md).
func TestParseSize(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int64
	}{
		{"65536", 65536},
		{"0", 0},
		{"64k", 64 << 10},
		{"64K", 64 << 10},
		{"64KiB", 64 << 10},
		{"256m", 256 << 20},
		{"256M", 256 << 20},
		{"256MiB", 256 << 20},
		{"256mib", 256 << 20},
		{"1g", 1 << 30},
		{"1GiB", 1 << 30},
		{"2t", 2 << 40},
		{"1TiB", 1 << 40},
		{"512B", 512},
		{" 4m ", 4 << 20},
	} {
		if got, err := ParseSize(tt.in); err != nil || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "-1", "10GB", "4MB", "1kB", "lots", "1.5g", "9999999TiB", "k"} {
		if got, err := ParseSize(bad); err == nil || !strings.Contains(err.Error(), "want bytes, or a number with k, m, g") {
			t.Errorf("ParseSize(%q) = %d, %v; want the one size error", bad, got, err)
		}
	}
	for _, tt := range []struct {
		size ByteSize
		want string
	}{{10 << 30, "10GiB"}, {1536 << 10, "1536KiB"}, {1 << 40, "1TiB"}, {1000, "1000"}, {0, "0"}} {
		if got := tt.size.String(); got != tt.want {
			t.Errorf("ByteSize(%d).String() = %q, want %q", int64(tt.size), got, tt.want)
		}
	}
}
