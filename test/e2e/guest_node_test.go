//go:build e2e && guest

package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// TestGuestNode checks that the guest is the node the guest tests are
// about (systemd as PID 1, cgroup v2 only, AppArmor on) and that minicri,
// installed as an operator would, runs as its systemd unit and answers the
// CRI with the systemd cgroup driver, detected: make install's config, as
// it was written, leaves cgroup_driver unset.
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
	if out := g.Run(t, "cmp /mnt/host/install/etc/minicri/minicri.toml /etc/minicri/minicri.toml && grep -c '^cgroup_driver' /etc/minicri/minicri.toml || true"); strings.TrimSpace(out) != "0" {
		t.Errorf("the guest's /etc/minicri/minicri.toml is not make install's file with cgroup_driver unset: %s", out)
	}
	st, err := d.Runtime.Status(context.Background(), true)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	for _, c := range st.GetStatus().GetConditions() {
		if !c.GetStatus() {
			t.Errorf("Status: condition %s false: %s %s", c.GetType(), c.GetReason(), c.GetMessage())
		}
	}
	var driver struct{ Driver, Source, Reason string }
	if err := json.Unmarshal([]byte(st.GetInfo()["cgroupDriver"]), &driver); err != nil {
		t.Errorf("Status info cgroupDriver %q: %v", st.GetInfo()["cgroupDriver"], err)
	}
	if driver.Driver != "systemd" || driver.Source != "detected" || !strings.Contains(driver.Reason, "systemd is PID 1") {
		t.Errorf("Status info cgroupDriver = %+v, want systemd, detected, because systemd is PID 1", driver)
	}
	logged := g.Run(t, `journalctl --no-pager -o cat -u minicri.service | grep 'msg="cgroup driver"' | tail -1`)
	if !strings.Contains(logged, "driver=systemd") || !strings.Contains(logged, "source=detected") {
		t.Errorf("minicri's start log does not say it detected the systemd driver: %q", logged)
	}
	if imgs := d.listImages(t, guestBusyboxRef); len(imgs) != 1 {
		t.Errorf("the imported image %s: ListImages found %d", guestBusyboxRef, len(imgs))
	}
}
