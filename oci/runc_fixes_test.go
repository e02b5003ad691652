package oci

import (
	"slices"
	"testing"
)

// The fixes of CVE-2025-31133, CVE-2025-52565 and CVE-2025-52881 came in
// runc 1.2.8, 1.3.3 and 1.4.0-rc.3; every earlier release of those lines,
// and every release before 1.2, lacks them.
func TestMissingRuncFixes(t *testing.T) {
	for _, tc := range []struct {
		version        string
		missing, known bool
	}{
		{"1.1.5+ds1", true, true}, // Debian 12
		{"1.1.12-0ubuntu2~22.04.1", true, true},
		{"1.0.0-rc93", true, true},
		{"1.0.0~rc93+ds1", true, true}, // Debian 11
		{"1.2.8~rc1", true, true},
		{"0.1.1", true, true},
		{"1.2.0", true, true},
		{"1.2.7", true, true},
		{"1.2.8", false, true},
		{"1.2.9", false, true},
		{"1.3.0-rc.1", true, true},
		{"1.3.2", true, true},
		{"1.3.3", false, true},
		{"1.4.0-rc.1", true, true},
		{"1.4.0-rc.2", true, true},
		{"1.4.0-rc.3", false, true},
		{"1.4.0-rc.3+dev", false, true},
		{"1.4.0", false, true},
		{"1.5.2", false, true}, // make deps' runc-current
		{"2.0.0", false, true},
		{"", false, false},
		{"1.2", false, false},
		{"v1.2.8", false, false},
		{"1.x.8", false, false},
	} {
		missing, known := MissingRuncFixes(tc.version)
		if (len(missing) > 0) != tc.missing || known != tc.known {
			t.Errorf("MissingRuncFixes(%q) = %v, %v; want missing %v, known %v", tc.version, missing, known, tc.missing, tc.known)
		}
		if len(missing) > 0 && !slices.Equal(missing, []string{"CVE-2025-31133", "CVE-2025-52565", "CVE-2025-52881"}) {
			t.Errorf("MissingRuncFixes(%q) = %v, want the three CVEs", tc.version, missing)
		}
	}
}

// The version comes from what the runc on this machine prints: its
// features' annotation, or the first line of --version.
func TestRuncVersionFromItsOutput(t *testing.T) {
	f, err := parseFeatures([]byte(`{"mountOptions":["rro"],"annotations":{"org.opencontainers.runc.commit":"1.1.5+ds1-1+deb12u1","org.opencontainers.runc.version":"1.1.5+ds1"}}`))
	if err != nil || f.RuncVersion != "1.1.5+ds1" || f.HasFixes() || len(f.MissingFixes()) != 3 {
		t.Errorf("features of Debian's runc: %+v, %v; want version 1.1.5+ds1, lacking the fixes", f, err)
	}
	f, err = parseFeatures([]byte(`{"mountOptions":["rro"]}`))
	if err != nil || f.RuncVersion != "" || f.HasFixes() || f.MissingFixes() != nil {
		t.Errorf("features without a version: %+v, %v; want nothing said of fixes", f, err)
	}
	out := "runc version 1.0.3\ncommit: v1.0.3-0-gf46b6ba2\nspec: 1.0.2-dev\n"
	if v := runcVersionLine([]byte(out)); v != "1.0.3" {
		t.Errorf("runc --version: %q, want 1.0.3", v)
	}
	if v := runcVersionLine([]byte("crun version 1.8.1\n")); v != "" {
		t.Errorf("crun --version read as runc %q", v)
	}
}
