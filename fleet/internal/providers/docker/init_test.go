package docker

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCheckInit: a copy replaced or changed after it was verified is never mounted.
func TestCheckInit(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "init-x")
	if err := os.WriteFile(bin, []byte("verified"), 0o711); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(bin)
	if err != nil {
		t.Fatal(err)
	}
	p := &Provider{init: bin, initStat: fi}
	if err := p.checkInit(); err != nil {
		t.Fatalf("checkInit() of the verified copy = %v, want nil", err)
	}
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := p.checkInit(); err == nil {
		t.Errorf("checkInit() after a chmod = nil, want an error")
	}
	swapped := filepath.Join(dir, "swapped")
	if err := os.WriteFile(swapped, []byte("verified"), 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(swapped, bin); err != nil {
		t.Fatal(err)
	}
	if err := p.checkInit(); err == nil {
		t.Errorf("checkInit() after the copy was swapped = nil, want an error")
	}
}
