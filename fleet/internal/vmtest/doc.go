// Package vmtest runs the namespace provider's tests on a cgroup v2 kernel: this project's CI
// host is cgroup v1, where no v2 code of the provider can run.
//
// TestCgroupV2 boots Debian's kernel (unpacked into var/kernel by scripts/setup, never installed
// on the host) in a QEMU guest with cgroup_no_v1=all, so that every controller is on the v2
// hierarchy. The guest is emulated (TCG): no /dev/kvm is needed, and it is slow, about 2.5 times
// native for a sandbox's start. Its initramfs holds only guestinit (internal/cmd/guestinit) and
// the virtio, 9p and overlay modules, which Debian builds as modules; the sandbox root fs
// (RUNFLEET_TEST_ROOTFS) is its root, read-only over 9p under a tmpfs overlay, and the statically
// linked test binaries come over 9p too. guestinit runs them with -test.v and CI=true, so that
// nothing missing is skipped, twice: in a cgroup below the root with the controllers delegated, as
// systemd runs a service with Delegate=yes, and again in a cgroup namespace rooted at such a
// cgroup, as a container sees the tree (its cgroup reads as "/" but is not the root). Then it
// prints a verdict line and powers off: a guest that ends without "done" failed, whatever the
// tests printed.
package vmtest
