// Package mountinfo finds the mount that holds a path, from
// /proc/self/mountinfo: the image store (which filesystem it uses), the
// network package (whether a pin directory propagates) and the spec
// generator (whether a bind source can propagate) all need it.
package mountinfo

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Path is the calling process's mount table.
const Path = "/proc/self/mountinfo"

// Mount is the part of a mountinfo line the callers need.
type Mount struct {
	Point    string // the mount point, unescaped
	Optional string // the optional fields, e.g. "shared:1 master:2"
}

// Shared reports whether the mount propagates to a peer group.
func (m Mount) Shared() bool { return strings.Contains(m.Optional, "shared:") }

// Slave reports whether the mount receives from a master group.
func (m Mount) Slave() bool { return strings.Contains(m.Optional, "master:") }

// Lookup finds the mount that holds path in the mountinfo file at table:
// the deepest mount point wins, and of mounts on the same point the last
// listed, which is stacked on top. path must be resolved (no symlinks).
func Lookup(table, path string) (Mount, error) {
	f, err := os.Open(table)
	if err != nil {
		return Mount{}, err
	}
	defer f.Close()
	best, found := Mount{}, false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		m, ok := ParseLine(sc.Text())
		if !ok || !Within(path, m.Point) || (found && len(m.Point) < len(best.Point)) {
			continue
		}
		best, found = m, true
	}
	if err := sc.Err(); err != nil {
		return Mount{}, fmt.Errorf("read %s: %w", table, err)
	}
	if !found {
		return Mount{}, fmt.Errorf("no mount holds %s", path)
	}
	return best, nil
}

// ParseLine reads field 5 (the mount point) and the optional fields between
// field 7 and the "-" separator of one mountinfo line.
func ParseLine(line string) (Mount, bool) {
	fields := strings.Fields(line)
	if len(fields) < 7 {
		return Mount{}, false
	}
	sep := -1
	for i := 6; i < len(fields); i++ {
		if fields[i] == "-" {
			sep = i
			break
		}
	}
	if sep < 0 {
		return Mount{}, false
	}
	return Mount{Point: unescape(fields[4]), Optional: strings.Join(fields[6:sep], " ")}, true
}

// Within reports whether path is dir or below it.
func Within(path, dir string) bool {
	return dir == "/" || path == dir || strings.HasPrefix(path, dir+"/")
}

// unescape decodes the kernel's octal escapes (\040 for a space).
func unescape(s string) string {
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
