//go:build e2e && guest

package e2e

import (
	"context"
	"strings"
	"testing"
)

// TestGuestNode checks that the guest is the node the guest tests are
// about (systemd as PID 1, cgroup v2 only, AppArmor on) and that minicri,
// installed as an operator would, runs as its systemd unit and answers the
// CRI with the systemd cgroup driver.
func TestGuestNode(t *testing.T) {
	g, d := guestTest(t)
	checks := map[string]string{
		"cat /proc/1/comm":                               "systemd",
		"stat -fc %T /sys/fs/cgroup":                     "cgroup2fs",
		"cat /sys/module/apparmor/parameters/enabled":    "Y",
		"systemctl is-active minicri.service":            "active",
		"systemctl show -p Type --value minicri.service": "notify",
	}
	for script, want := range checks {
		if got := strings.TrimSpace(g.Run(t, script)); got != want {
			t.Errorf("guest: %s = %q, want %q", script, got, want)
		}
	}
	resp, err := d.Runtime.RuntimeConfig(context.Background())
	if err != nil {
		t.Fatalf("RuntimeConfig: %v", err)
	}
	if got := resp.GetLinux().GetCgroupDriver().String(); got != "SYSTEMD" {
		t.Errorf("RuntimeConfig: cgroup driver %s, want SYSTEMD", got)
	}
	if st, err := d.Runtime.Status(context.Background(), false); err != nil {
		t.Fatalf("Status: %v", err)
	} else {
		for _, c := range st.GetStatus().GetConditions() {
			if !c.GetStatus() {
				t.Errorf("Status: condition %s false: %s %s", c.GetType(), c.GetReason(), c.GetMessage())
			}
		}
	}
	if imgs := d.listImages(t, guestBusyboxRef); len(imgs) != 1 {
		t.Errorf("the imported image %s: ListImages found %d", guestBusyboxRef, len(imgs))
	}
}
