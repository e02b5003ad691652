package oci

import (
	"path/filepath"
	"testing"
)

func TestCgroupRelPath(t *testing.T) {
	tests := []struct {
		path   string
		driver CgroupDriver
		want   string
		ok     bool
	}{
		{"/kubepods/pod1/abc", CgroupfsDriver, "/kubepods/pod1/abc", true},
		{"kubepods/abc", "", "/kubepods/abc", true},
		{"kubepods-besteffort-pod1.slice:minicri:abc", SystemdDriver, "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/minicri-abc.scope", true},
		{"system.slice:minicri:abc", SystemdDriver, "/system.slice/minicri-abc.scope", true},
		{"-.slice:minicri:abc", SystemdDriver, "/minicri-abc.scope", true},
		{"a--b.slice:minicri:abc", SystemdDriver, "", false},
		{"notaslice:minicri:abc", SystemdDriver, "", false},
		{"missing-parts", SystemdDriver, "", false},
	}
	for _, tt := range tests {
		got, err := cgroupRelPath(tt.path, tt.driver)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("cgroupRelPath(%q, %q) = %q, %v; want %q ok %v", tt.path, tt.driver, got, err, tt.want, tt.ok)
		}
	}
}

func TestHostFactReaders(t *testing.T) {
	dir := t.TempDir()
	status := filepath.Join(dir, "status")
	writeFile(t, status, "Name:\tx\nCapInh:\t0000000000000000\nCapBnd:\t000001fffeffffff\nCapAmb:\t0000000000000000\n")
	if got := readBoundingCaps(status); got != 0x000001fffeffffff {
		t.Errorf("bounding caps = %x", uint64(got))
	}
	if got := readBoundingCaps(filepath.Join(dir, "missing")); got != ^capSet(0) {
		t.Errorf("missing status: bounding caps = %x, want all", uint64(got))
	}
	adj := filepath.Join(dir, "oom_score_adj")
	writeFile(t, adj, "-500\n")
	if got := readOOMScoreAdj(adj); got != -500 {
		t.Errorf("oom_score_adj = %d, want -500", got)
	}
	cg := filepath.Join(dir, "cgroup")
	writeFile(t, cg, "4:memory:/x\n0::/system.slice/minicri.service\n")
	if got := ownCgroup2Path(cg); got != "/system.slice/minicri.service" {
		t.Errorf("own cgroup = %q", got)
	}
	enabled := filepath.Join(dir, "enabled")
	writeFile(t, enabled, "Y\n")
	if !readAppArmorEnabled(enabled) || readAppArmorEnabled(filepath.Join(dir, "missing")) {
		t.Errorf("AppArmor detection wrong")
	}
	last := filepath.Join(dir, "cap_last_cap")
	writeFile(t, last, "40\n")
	if got := readLastCap(last); got != 40 {
		t.Errorf("last cap = %d", got)
	}
}
