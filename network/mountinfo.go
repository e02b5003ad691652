package network

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/internal/mountinfo"
)

// ensurePrivateMount makes sure that mounts made under dir stay in the
// daemon's mount namespace. On a host where / is a shared mount (every
// systemd host), a pin bind-mounted there would be copied into every peer
// mount namespace; a copy in a namespace that no longer receives our unmount
// keeps the pod's network namespace (and its veth and IP) alive after
// UnpinNamespaces. As ip-netns does for its own directory, dir is then made a bind
// mount of itself, whose propagation we choose: private. It reports whether it
// made that mount, which UnpinNamespaces later detaches. Where dir already
// sits on a private or slave mount (as in most containers) nothing is mounted.
func ensurePrivateMount(dir string) (bool, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return false, fmt.Errorf("resolve %s: %w", dir, err)
	}
	shared, err := onSharedMount(real)
	if err != nil || !shared {
		return false, err
	}
	if err := unix.Mount(real, real, "", unix.MS_BIND, ""); err != nil {
		return false, fmt.Errorf("bind %s onto itself: %w", real, err)
	}
	if err := unix.Mount("", real, "", unix.MS_PRIVATE, ""); err != nil {
		_ = unix.Unmount(real, unix.MNT_DETACH)
		return false, fmt.Errorf("make %s a private mount: %w", real, err)
	}
	return true, nil
}

// onSharedMount reports whether the mount that holds path propagates to a
// peer group ("shared:N" in /proc/self/mountinfo). path must be resolved.
func onSharedMount(path string) (bool, error) {
	m, err := mountinfo.Lookup(mountinfo.Path, path)
	if err != nil {
		return false, err
	}
	return mountinfo.Shared(m), nil
}

// mountsBelow reports whether anything is mounted at or below dir, which
// must be resolved.
func mountsBelow(dir string) (bool, error) {
	mounts, err := mountinfo.Below(mountinfo.Path, dir)
	if err != nil {
		return false, err
	}
	return len(mounts) > 0, nil
}
