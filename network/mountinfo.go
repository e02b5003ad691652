package network

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
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
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	defer f.Close()

	best, shared := "", false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		mountPoint, optional, ok := parseMountInfoLine(sc.Text())
		if !ok || !pathUnder(path, mountPoint) || len(mountPoint) < len(best) {
			continue
		}
		// Later lines win on a tie: a mount stacked on the same point hides
		// the ones listed before it.
		best = mountPoint
		shared = strings.Contains(optional, "shared:")
	}
	if err := sc.Err(); err != nil {
		return false, fmt.Errorf("read mountinfo: %w", err)
	}
	return shared, nil
}

// parseMountInfoLine returns the mount point and the optional fields
// ("shared:1 master:2") of one /proc/self/mountinfo line.
func parseMountInfoLine(line string) (mountPoint, optional string, ok bool) {
	fields := strings.Fields(line)
	if len(fields) < 7 {
		return "", "", false
	}
	end := 6
	for end < len(fields) && fields[end] != "-" {
		end++
	}
	return unescapeMountPath(fields[4]), strings.Join(fields[6:end], " "), true
}

// unescapeMountPath undoes the kernel's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func pathUnder(path, mountPoint string) bool {
	return mountPoint == "/" || path == mountPoint || strings.HasPrefix(path, mountPoint+"/")
}
