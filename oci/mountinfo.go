package oci

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// mountInfoPath is read to check a bind source's propagation; tests replace it.
var mountInfoPath = "/proc/self/mountinfo"

// checkSourcePropagation refuses a propagating bind whose source cannot
// propagate: without it the container would silently see no mount events. A
// Bidirectional mount needs a shared source mount; HostToContainer needs a
// shared or slave one. This mirrors containerd's check.
func checkSourcePropagation(source string, p Propagation) error {
	if p == PropagationPrivate {
		return nil
	}
	mountPoint, optional, err := mountOf(mountInfoPath, source)
	if err != nil {
		return fmt.Errorf("check propagation of mount source %s: %w", source, err)
	}
	shared := strings.Contains(optional, "shared:")
	slave := strings.Contains(optional, "master:")
	switch {
	case p == PropagationBidirectional && !shared:
		return fmt.Errorf("%w: mount source %s is on %s, which is not a shared mount (bidirectional propagation needs one)", ErrInvalid, source, mountPoint)
	case p == PropagationHostToContainer && !shared && !slave:
		return fmt.Errorf("%w: mount source %s is on %s, which is neither a shared nor a slave mount (host-to-container propagation needs one)", ErrInvalid, source, mountPoint)
	}
	return nil
}

// mountOf finds the mount that holds path in a mountinfo file and returns its
// mount point and optional fields ("shared:1 master:2"). The deepest mount point
// wins; of mounts on the same point, the last (the top one).
func mountOf(mountinfo, path string) (mountPoint, optional string, err error) {
	f, err := os.Open(mountinfo)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	best := -1
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		point, opt, ok := parseMountInfoLine(sc.Text())
		if !ok || !pathWithin(path, point) || len(point) < best {
			continue
		}
		best, mountPoint, optional = len(point), point, opt
	}
	if err := sc.Err(); err != nil {
		return "", "", err
	}
	if best < 0 {
		return "", "", fmt.Errorf("no mount holds %s", path)
	}
	return mountPoint, optional, nil
}

// parseMountInfoLine reads field 5 (mount point) and the optional fields that
// sit between field 6 and the "-" separator.
func parseMountInfoLine(line string) (mountPoint, optional string, ok bool) {
	fields := strings.Fields(line)
	if len(fields) < 7 {
		return "", "", false
	}
	sep := -1
	for i := 6; i < len(fields); i++ {
		if fields[i] == "-" {
			sep = i
			break
		}
	}
	if sep < 0 {
		return "", "", false
	}
	return unescapeOctal(fields[4]), strings.Join(fields[6:sep], " "), true
}

// unescapeOctal decodes mountinfo's \040-style escapes of spaces and tabs.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func pathWithin(path, dir string) bool {
	return dir == "/" || path == dir || strings.HasPrefix(path, dir+"/")
}
