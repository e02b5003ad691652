package mountinfo

import (
	"os"
	"path/filepath"
	"testing"
)

func TestLookupDeepestAndTopmost(t *testing.T) {
	table := filepath.Join(t.TempDir(), "mountinfo")
	lines := "" +
		"1 0 0:1 / / rw shared:1 - ext4 /dev/vda rw\n" +
		"2 1 0:2 / /run rw - tmpfs tmpfs rw\n" +
		"3 2 0:3 / /run/pods rw master:7 - tmpfs tmpfs rw\n" +
		"4 2 0:4 / /run/pods rw shared:9 - tmpfs tmpfs rw\n" +
		"5 1 0:5 / /runner rw - tmpfs tmpfs rw\n" +
		`6 1 0:6 / /mnt\040two rw master:3 - tmpfs tmpfs rw` + "\n"
	if err := os.WriteFile(table, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		path          string
		point         string
		shared, slave bool
	}{
		{"/run/pods/x/ns", "/run/pods", true, false}, // the stacked mount, listed last
		{"/run/other", "/run", false, false},
		{"/runnerish", "/", true, false}, // a name prefix is not a path prefix
		{"/", "/", true, false},
		{"/mnt two/x", "/mnt two", false, true}, // the kernel's escapes decoded
	}
	for _, c := range cases {
		m, err := Lookup(table, c.path)
		if err != nil || m.Mountpoint != c.point || Shared(m) != c.shared || Slave(m) != c.slave {
			t.Errorf("Lookup(%s) = %+v, %v; want point %s, shared %v, slave %v", c.path, m, err, c.point, c.shared, c.slave)
		}
	}
}
