package config

import (
	"strings"
	"testing"
)

func TestResolveCgroupDriver(t *testing.T) {
	systemd, noSystemd := Node{SystemdBooted: true}, Node{}
	cases := []struct {
		name       string
		configured string
		node       Node
		want       string // the driver; "" for a refusal
		source     string
		reason     string // in the reason or the error
	}{
		{"unset where systemd is PID 1", "", systemd, SystemdDriver, Detected, "systemd is PID 1"},
		{"unset without systemd", "", noSystemd, CgroupfsDriver, Detected, "systemd is not PID 1"},
		{"cgroupfs given without systemd", CgroupfsDriver, noSystemd, CgroupfsDriver, Configured, "set in the configuration"},
		{"cgroupfs given where systemd is PID 1", CgroupfsDriver, systemd, CgroupfsDriver, Configured, "systemd is PID 1 here"},
		{"systemd given where systemd is PID 1", SystemdDriver, systemd, SystemdDriver, Configured, "set in the configuration"},
		{"systemd given without systemd", SystemdDriver, noSystemd, "", "", "systemd is not PID 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ResolveCgroupDriver(c.configured, c.node)
			if c.want == "" {
				if err == nil || !strings.Contains(err.Error(), `"cgroup_driver"`) || !strings.Contains(err.Error(), c.reason) {
					t.Fatalf("ResolveCgroupDriver(%q) = %+v, %v; want an error naming cgroup_driver and %q", c.configured, got, err, c.reason)
				}
				return
			}
			if err != nil {
				t.Fatalf("ResolveCgroupDriver(%q): %v", c.configured, err)
			}
			if got.Driver != c.want || got.Source != c.source || !strings.Contains(got.Reason, c.reason) {
				t.Fatalf("ResolveCgroupDriver(%q) = %+v, want driver %s, source %s, a reason with %q", c.configured, got, c.want, c.source, c.reason)
			}
		})
	}
}

// minicri config leaves cgroup_driver unset, so that the file it writes is
// right on any node, and says what unset resolves to where it was written.
func TestRenderLeavesCgroupDriverUnset(t *testing.T) {
	for _, c := range []struct {
		node Node
		want string
	}{
		{Node{SystemdBooted: true}, "unset means systemd: systemd is PID 1"},
		{Node{}, "unset means cgroupfs: systemd is not PID 1"},
	} {
		text := Render(Default(), c.node)
		if strings.Contains(text, "\ncgroup_driver =") || !strings.Contains(text, "\n# cgroup_driver = ") {
			t.Errorf("cgroup_driver is not written commented out:\n%s", text)
		}
		if !strings.Contains(text, c.want) {
			t.Errorf("SystemdBooted=%v: no comment %q:\n%s", c.node.SystemdBooted, c.want, text)
		}
		cfg, err := load(t, "--config", writeFile(t, text))
		if err != nil || cfg.CgroupDriver != "" {
			t.Errorf("the rendered file loads as cgroup_driver %q (%v), want unset", cfg.CgroupDriver, err)
		}
	}
	explicit := Default()
	explicit.CgroupDriver = SystemdDriver
	if text := Render(explicit, Node{}); !strings.Contains(text, "\ncgroup_driver = \"systemd\"") || !strings.Contains(text, "refuses this value") {
		t.Errorf("an explicit systemd where there is none: want it written and the refusal said:\n%s", text)
	}
}
