package oci

import (
	"bufio"
	"bytes"
	"math"
	"strconv"
	"strings"
)

// The runc security fixes a handler's runc must have to be the default,
// and the releases of each line that have them. CVE-2025-31133 (masked
// paths through a /dev/null replaced by a symlink), CVE-2025-52565
// (/dev/console mount races) and CVE-2025-52881 (LSM labels and procfs
// writes redirected): container escapes, fixed together in runc 1.2.8,
// 1.3.3 and 1.4.0-rc.3. Debian 12's runc 1.1.5 has none of them.
var (
	runcFixes = []string{"CVE-2025-31133", "CVE-2025-52565", "CVE-2025-52881"}
	// RuncFixedIn names the first releases with runcFixes, for messages.
	RuncFixedIn = "runc 1.2.8, 1.3.3, 1.4.0-rc.3 or later"
	// runcFixedLines: minor line of 1.x → the first fixed release in it.
	// Lines before 1.2 got no fix; lines after 1.4 were born with it.
	runcFixedLines = map[int]runcVersion{
		2: {1, 2, 8, math.MaxInt},
		3: {1, 3, 3, math.MaxInt},
		4: {1, 4, 0, 3},
	}
)

// runcVersion is major.minor.patch and the number of an -rc.N pre-release
// (math.MaxInt for a release, which comes after all of its rcs).
type runcVersion struct{ major, minor, patch, rc int }

func (v runcVersion) less(w runcVersion) bool {
	a := []int{v.major, v.minor, v.patch, v.rc}
	b := []int{w.major, w.minor, w.patch, w.rc}
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// parseRuncVersion reads "1.1.5+ds1", "1.4.0-rc.3", "1.2.8",
// "1.1.12-0ubuntu2~22.04.1" (a distribution's own suffix is the release it
// names), "1.0.0-rc93", and "1.0.0~rc93+ds1" (Debian 11's: Debian spells
// a pre-release with a tilde). ok is false for anything else.
func parseRuncVersion(s string) (runcVersion, bool) {
	s, _, _ = strings.Cut(s, "+")
	core, pre, _ := strings.Cut(s, "-")
	if c, p, tilde := strings.Cut(core, "~"); tilde {
		core, pre = c, p
	}
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return runcVersion{}, false
	}
	var n [3]int
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 {
			return runcVersion{}, false
		}
		n[i] = v
	}
	v := runcVersion{n[0], n[1], n[2], math.MaxInt}
	if rest, isRC := strings.CutPrefix(pre, "rc"); isRC {
		rc, err := strconv.Atoi(strings.TrimPrefix(rest, "."))
		if err != nil || rc < 0 {
			return runcVersion{}, false
		}
		v.rc = rc
	}
	return v, true
}

// MissingRuncFixes lists the fixes of runcFixes that a runc of version
// lacks, judged by the version alone: a distribution that backported them
// into an older release is not seen. known is false for a version that
// does not parse; nothing is said of it then.
func MissingRuncFixes(version string) (missing []string, known bool) {
	v, ok := parseRuncVersion(version)
	if !ok {
		return nil, false
	}
	switch {
	case v.major > 1:
		return nil, true
	case v.major < 1 || v.minor < 2:
		return runcFixes, true
	}
	first, ok := runcFixedLines[v.minor]
	if !ok { // 1.5 and later
		return nil, true
	}
	if v.less(first) {
		return runcFixes, true
	}
	return nil, true
}

// runcVersionLine reads the version from `runc --version`, whose first
// line is "runc version 1.1.5+ds1"; "" when it is not a runc's.
func runcVersionLine(out []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(out))
	if sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "runc version "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
