package mountinfo

import (
	"os"
	"path/filepath"
	"testing"
)

func TestParseLine(t *testing.T) {
	cases := []struct {
		line string
		want Mount
		ok   bool
	}{
		{`36 35 98:0 /mnt1 /mnt\040two rw,noatime master:1 shared:3 - ext3 /dev/root rw`, Mount{"/mnt two", "master:1 shared:3"}, true},
		{`22 1 0:21 / / rw - tmpfs tmpfs rw`, Mount{"/", ""}, true},
		{"41 31 0:38 / /sys/fs/cgroup/unified rw shared:9 master:2 - cgroup2 cgroup2 rw", Mount{"/sys/fs/cgroup/unified", "shared:9 master:2"}, true},
		{"garbage", Mount{}, false},
		{`22 1 0:21 / / rw shared:1 tmpfs`, Mount{}, false}, // no separator
	}
	for _, c := range cases {
		got, ok := ParseLine(c.line)
		if got != c.want || ok != c.ok {
			t.Errorf("ParseLine(%q) = %+v, %v; want %+v, %v", c.line, got, ok, c.want, c.ok)
		}
	}
}

func TestLookupDeepestAndTopmost(t *testing.T) {
	table := filepath.Join(t.TempDir(), "mountinfo")
	lines := "" +
		"1 0 0:1 / / rw shared:1 - ext4 /dev/vda rw\n" +
		"2 1 0:2 / /run rw - tmpfs tmpfs rw\n" +
		"3 2 0:3 / /run/pods rw master:7 - tmpfs tmpfs rw\n" +
		"4 2 0:4 / /run/pods rw shared:9 - tmpfs tmpfs rw\n" +
		"5 1 0:5 / /runner rw - tmpfs tmpfs rw\n"
	if err := os.WriteFile(table, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		path   string
		point  string
		shared bool
	}{
		{"/run/pods/x/ns", "/run/pods", true}, // the stacked mount, listed last
		{"/run/other", "/run", false},
		{"/runnerish", "/", true}, // a name prefix is not a path prefix
		{"/", "/", true},
	}
	for _, c := range cases {
		m, err := Lookup(table, c.path)
		if err != nil || m.Point != c.point || m.Shared() != c.shared {
			t.Errorf("Lookup(%s) = %+v, %v; want point %s, shared %v", c.path, m, err, c.point, c.shared)
		}
	}
}
