//go:build e2e

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// benchDisk mounts a fresh ext4 filesystem, as mkfs.ext4 makes it by
// default (with its journal, as a node's disk has it), from a loop device
// on a sparse file, and returns where: a bench's daemon root and its
// floors write there, so that the bench times their work, not this host's
// disk. The loop device does direct I/O to its file, so that what a sync
// writes goes to the disk once, not through a second page cache.
//
// The host's root filesystem here is an ext4 without a journal, and ext4
// without one makes each new inode skip every inode freed in the last one
// to six minutes (its recently_deleted check, one buffer lookup each):
// after a RemoveImage of the pull bench's 25,000 files, tar took 5-8 s of
// the kernel's CPU for /usr/include's 8,806 files, against 0.5-0.7 s on a
// fresh filesystem, and whichever of the floor and the pull came right
// after a removal paid for it.
//
// Its cleanups are registered now, so they run after those of whatever is
// started on it later (the daemon's stop first).
func benchDisk(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "disk.img"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	err = f.Truncate(8 << 30)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v %s", err, out)
	}
	out, err := exec.Command("losetup", "--direct-io=on", "--find", "--show", img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup %s: %v %s", img, err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "--detach", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup --detach %s: %v %s", dev, err, out)
		}
	})
	benchMount(t, mnt, dev)
	dio, _ := os.ReadFile("/sys/block/" + filepath.Base(dev) + "/loop/dio")
	t.Logf("bench disk %s on %s, direct I/O %s", mnt, dev, strings.TrimSpace(string(dio)))
	return mnt
}

// benchRunDir mounts a tmpfs for a bench daemon's run dir, as a node's
// /run is one: the monitors' sockets and the exit files live there, and a
// bench that kept them on the host's disk would time that disk.
func benchRunDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	benchMount(t, dir, "tmpfs", "-t", "tmpfs", "-o", "mode=0700,size=256m")
	return dir
}

// benchMount mounts source on dir and unmounts it at the test's end.
func benchMount(t *testing.T, dir, source string, args ...string) {
	t.Helper()
	if out, err := exec.Command("mount", append(args, source, dir)...).CombinedOutput(); err != nil {
		t.Fatalf("mount %s on %s: %v %s", source, dir, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
}

// benchNodeDirs places a bench daemon as a node has it: its root on a
// disk of its own (benchDisk), its run dir on a tmpfs. floor is a dir on
// the same disk for the bench's floors.
func benchNodeDirs(t *testing.T) (opts []DaemonOption, floor string) {
	t.Helper()
	disk := benchDisk(t)
	floor = filepath.Join(disk, "floor")
	if err := os.Mkdir(floor, 0o700); err != nil {
		t.Fatal(err)
	}
	return []DaemonOption{WithRoot(filepath.Join(disk, "root")), WithRunDir(benchRunDir(t))}, floor
}
