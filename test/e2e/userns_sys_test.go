//go:build e2e

package e2e

import (
	"os"
	"slices"
	"strings"
	"testing"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// A hostNetwork pod with hostUsers: false (KEP-5607) gets the host's /sys,
// since it cannot mount a sysfs of its own. A container of it with
// CAP_SYS_ADMIN in its user namespace and no seccomp filter, the most a
// pod author can ask for, tries to unmask it: remount it read-write, bind
// it elsewhere and remount the copy, and unmount every mount below it,
// runc's /sys/fs/cgroup mounts first. The /sys stays read-only, and
// nothing of the host's mounts below /sys (its cgroup tree, securityfs,
// debugfs) is there to be found under them.
func TestUserNamespaceHostNetworkSysCannotBeUnmasked(t *testing.T) {
	d, ref := startUsernsDaemon(t)
	cfg := d.usernsPodConfig("userns-hostnet-sys")
	cfg.Linux.SecurityContext.NamespaceOptions.Network = runtime.NamespaceMode_NODE
	podID := d.runPodOn(t, cfg, usernsHandler)

	// Deepest first, a few rounds: a mount hides those below it until it
	// goes. Only the mounts below /sys: the /sys bind itself, made in the
	// container's namespace, may go, leaving the image's empty /sys.
	ctr := containerConfig("attacker", ref, "sh", "-c", `
mount -o remount,bind,rw /sys; echo remount-exit=$?
mount -o remount,bind,rw,nosuid,nodev,noexec /sys; echo remount-flags-exit=$?
mkdir -p /tmp/clone; mount --bind /sys /tmp/clone; echo clone-exit=$?
mount -o remount,bind,rw /tmp/clone; echo clone-remount-exit=$?
before=$(awk '$5 ~ "^/sys/" {n++} END {print n+0}' /proc/self/mountinfo)
for round in 1 2 3 4 5 6; do
	for m in $(awk '$5 ~ "^/sys/" {print $5}' /proc/self/mountinfo | sort -r); do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
done
echo below-sys-before=$before below-sys-after=$(awk '$5 ~ "^/sys/" {n++} END {print n+0}' /proc/self/mountinfo)
echo cgroup=$(ls -A /sys/fs/cgroup | tr '\n' ' ')
echo security=$(ls -A /sys/kernel/security | tr '\n' ' ')
cat /proc/self/mountinfo`)
	ctr.Linux = &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{
		Capabilities:     &runtime.Capability{AddCapabilities: []string{"SYS_ADMIN"}},
		Seccomp:          &runtime.SecurityProfile{ProfileType: runtime.SecurityProfile_Unconfined},
		NamespaceOptions: &runtime.NamespaceOption{Network: runtime.NamespaceMode_NODE, Pid: runtime.NamespaceMode_CONTAINER, UsernsOptions: usernsOptions()},
	}}
	st, out := d.runToExit(t, podID, cfg, ctr)
	t.Logf("the attacker's output:\n%s", out)
	out = "\n" + out // every line of it after a newline
	if st.GetExitCode() != 0 {
		t.Fatalf("container exited %d", st.GetExitCode())
	}
	if !strings.Contains(out, "\nclone-exit=0\n") {
		t.Errorf("the container could not bind its /sys elsewhere: the remount of the copy proves nothing")
	}
	for _, attempt := range []string{"remount-exit", "remount-flags-exit", "clone-remount-exit"} {
		if !strings.Contains(out, "\n"+attempt+"=") {
			t.Errorf("the output lacks %s: the attack did not run", attempt)
		} else if strings.Contains(out, "\n"+attempt+"=0\n") {
			t.Errorf("%s: the container made a bind of the host's /sys read-write", attempt)
		}
	}
	if got := mountFlags(out, "/sys"); !slices.Contains(got, "ro") {
		t.Errorf("/sys mounted %v after the attack, want ro", got)
	}
	// The attack must have taken runc's mounts away, or it proved nothing.
	if !strings.Contains(out, "below-sys-after=0\n") {
		t.Errorf("mounts below /sys are left after the attack: the test proves nothing")
	}
	var seen []string
	for _, l := range strings.Split(out, "\n") {
		if s, ok := strings.CutPrefix(l, "cgroup="); ok {
			seen = strings.Fields(s)
		}
	}
	host, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range host {
		if slices.Contains(seen, e.Name()) {
			t.Errorf("the container sees the host's /sys/fs/cgroup (%q of %v)", e.Name(), seen)
			break
		}
	}
	if !strings.Contains(out, "security=\n") {
		t.Errorf("the container sees a mount of the host's below /sys/kernel/security")
	}
}
