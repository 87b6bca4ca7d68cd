package vmtest

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/testenv"
)

// guestPackages are the packages whose tests run in the guest: the namespace provider's own
// (with the conformance and escape battery of providertest) and the pool's, which drives the
// provider without Redis or NATS.
var guestPackages = []string{"providers/namespace", "pool"}

// Bounds for a loaded 2-core host emulating the guest's CPUs: the guest boots in about 8 s.
const (
	guestTimeout = 25 * time.Minute
	testTimeout  = "20m" // each test binary's -test.timeout in the guest
)

// TestCgroupV2 boots Debian's kernel with cgroup v1 off in a QEMU guest (TCG: this host has no
// /dev/kvm) whose root is the sandbox root fs, runs the namespace provider's tests there and fails
// if any failed or the guest did not power off in time. RUNFLEET_VMTEST_RUN narrows the guest's
// tests (-test.run). It runs only when RUNFLEET_VMTEST=1, as `make test-cgroup2` sets: the rest
// of the suite should not wait a guest's quarter of an hour.
func TestCgroupV2(t *testing.T) {
	if os.Getenv("RUNFLEET_VMTEST") != "1" {
		t.Skip("make test-cgroup2 runs it (RUNFLEET_VMTEST=1)")
	}
	testenv.NeedRoot(t)
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		testenv.Missing(t, "qemu-system-x86_64 (Debian's qemu-system-x86): %v", err)
	}
	kernel := os.Getenv("RUNFLEET_TEST_KERNEL")
	if kernel == "" {
		kernel, _ = filepath.Abs("../../../var/kernel")
	}
	if _, err := os.Stat(filepath.Join(kernel, "vmlinuz")); err != nil {
		testenv.Missing(t, "Debian's kernel unpacked in %s (scripts/setup test): %v", kernel, err)
	}
	rootfs := testenv.RootFS(t)
	if rootfs == "" {
		testenv.Missing(t, "RUNFLEET_TEST_ROOTFS, the guest's root file system")
	}

	work := t.TempDir()
	bins := filepath.Join(work, "vmtest")
	if err := os.Mkdir(bins, 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for _, pkg := range guestPackages {
		build(t, "test", "-c", "-o", filepath.Join(bins, filepath.Base(pkg)+".test"), "github.com/runfleet/runfleet/fleet/internal/"+pkg)
	}
	init := filepath.Join(work, "init")
	build(t, "build", "-o", init, "github.com/runfleet/runfleet/fleet/internal/cmd/guestinit")
	// The guest has no Go toolchain, and TestConformanceSmallSupervisor builds the supervisor it
	// tests; that battery runs on the host only.
	args := []string{"-test.v", "-test.count=1", "-test.timeout=" + testTimeout, "-test.skip=^TestConformanceSmallSupervisor$"}
	if run := os.Getenv("RUNFLEET_VMTEST_RUN"); run != "" {
		args = append(args, "-test.run="+run)
	}
	if err := os.WriteFile(filepath.Join(bins, "args"), []byte(strings.Join(args, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	modules, err := moduleOrder(filepath.Join(kernel, "modules", "kernel"), "virtio_pci", "9pnet_virtio", "9p", "overlay")
	if err != nil {
		t.Fatal(err)
	}
	initrd := filepath.Join(work, "initrd")
	if err := writeInitramfs(initrd, init, modules); err != nil {
		t.Fatal(err)
	}
	built := time.Now()

	ctx, cancel := context.WithTimeout(t.Context(), guestTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemu,
		"-accel", "tcg,thread=multi", "-cpu", "max", "-smp", "2", "-m", "3072",
		"-nodefaults", "-no-user-config", "-display", "none", "-serial", "stdio", "-no-reboot",
		"-kernel", filepath.Join(kernel, "vmlinuz"), "-initrd", initrd,
		"-append", "console=ttyS0 cgroup_no_v1=all panic=-1 quiet",
		"-virtfs", "local,path="+rootfs+",mount_tag=rootfs,security_model=none,readonly=on",
		"-virtfs", "local,path="+bins+",mount_tag=vmtest,security_model=none,readonly=on")
	// A test binary killed outright takes its guest along instead of leaving it running.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr testenv.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	res := readConsole(t, bufio.NewScanner(stdout), built)
	werr := cmd.Wait()
	end := time.Now()
	t.Logf("build %.1fs, guest boot %.1fs, tests %.1fs, total %.1fs; %d tests passed, %d failed, %d skipped",
		built.Sub(start).Seconds(), res.booted.Sub(built).Seconds(), end.Sub(res.booted).Seconds(), end.Sub(start).Seconds(),
		len(res.passed), len(res.failed), len(res.skipped))
	for _, s := range res.skipped {
		t.Logf("skipped in the guest: %s", s)
	}
	if ctx.Err() != nil {
		t.Fatalf("guest did not power off within %v", guestTimeout)
	}
	if werr != nil {
		t.Errorf("qemu: %v: %s", werr, stderr.String())
	}
	if !res.done {
		t.Errorf("guest did not finish: %s", cmp.Or(res.verdict, "no verdict on its console"))
	}
	for _, f := range res.failed {
		t.Errorf("failed in the guest: %s", f)
	}
	if len(res.passed) == 0 {
		t.Errorf("no test passed in the guest")
	}
}

// build runs the go tool for the guest: static binaries, since the guest's libc is the root fs's.
func build(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

type console struct {
	booted                  time.Time // the first test binary started
	done                    bool
	verdict                 string
	passed, failed, skipped []string
}

var result = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+)`)

// readConsole logs the guest's console line by line until it closes, and gathers the results.
func readConsole(t *testing.T, sc *bufio.Scanner, built time.Time) console {
	t.Helper()
	res := console{booted: built}
	run := "" // "service namespace.test": where the results that follow come from
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		t.Log(line)
		if m := result.FindStringSubmatch(line); m != nil {
			name := run + " " + m[2]
			switch m[1] {
			case "PASS":
				res.passed = append(res.passed, name)
			case "FAIL":
				res.failed = append(res.failed, name)
			case "SKIP":
				res.skipped = append(res.skipped, name)
			}
		}
		rest, ok := strings.CutPrefix(line, "runfleet-vmtest: ")
		switch {
		case !ok:
		case strings.HasPrefix(rest, "run "):
			if f := strings.Fields(rest); len(f) >= 3 {
				run = f[1] + " " + f[2]
			}
			if res.booted.Equal(built) {
				res.booted = time.Now()
			}
		case strings.HasPrefix(rest, "done"), strings.HasPrefix(rest, "failed"):
			res.done = strings.HasPrefix(rest, "done")
			res.verdict = rest
		}
	}
	if err := sc.Err(); err != nil {
		res.verdict = fmt.Sprintf("console: %v", err)
	}
	return res
}
