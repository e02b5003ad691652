package network

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestWriteResolvConf(t *testing.T) {
	hostFile := filepath.Join(t.TempDir(), "host-resolv.conf")
	const hostContent = "nameserver 192.0.2.53\nsearch host.example\n"
	if err := os.WriteFile(hostFile, []byte(hostContent), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name                    string
		servers, searches, opts []string
		want                    string
		wantErr                 string
	}{
		{name: "no DNS config copies the host's", want: hostContent},
		{
			name:     "cluster DNS",
			servers:  []string{"10.96.0.10", "fd00::10"},
			searches: []string{"default.svc.cluster.local", "svc.cluster.local"},
			opts:     []string{"ndots:5", "edns0"},
			want:     "search default.svc.cluster.local svc.cluster.local\nnameserver 10.96.0.10\nnameserver fd00::10\noptions ndots:5 edns0\n",
		},
		{name: "servers only", servers: []string{"1.1.1.1"}, want: "nameserver 1.1.1.1\n"},
		{name: "newline in a search", searches: []string{"a\nnameserver 6.6.6.6"}, wantErr: "search domain"},
		{name: "NUL in a server", servers: []string{"1.1.1.1\x00"}, wantErr: "nameserver"},
		{name: "space in an option", opts: []string{"ndots:5 rotate"}, wantErr: "resolver option"},
		{name: "empty server", servers: []string{""}, wantErr: "empty nameserver"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "resolv.conf")
			err := writeResolvConf(path, hostFile, tc.servers, tc.searches, tc.opts)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one mentioning %q", err, tc.wantErr)
				}
				if _, statErr := os.Stat(path); !os.IsNotExist(statErr) {
					t.Errorf("refused write left %s", path)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := readFile(t, path); got != tc.want {
				t.Errorf("resolv.conf =\n%s\nwant\n%s", got, tc.want)
			}
			if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
				t.Errorf("mode %v, want 0644", fi.Mode().Perm())
			}
		})
	}
}

func TestWriteResolvConfWithoutHostFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	path := filepath.Join(t.TempDir(), "resolv.conf")
	if err := writeResolvConf(path, missing, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, path); got != "" {
		t.Errorf("resolv.conf = %q, want empty", got)
	}
}

func TestWriteHosts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hosts")
	err := WriteHosts(path, "web-0", []net.IP{net.ParseIP("10.88.0.5"), net.ParseIP("fd00::5")}, []HostAlias{
		{IP: net.ParseIP("192.0.2.1"), Hostnames: []string{"foo.local", "bar.local"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := hostsHeader +
		"10.88.0.5\tweb-0\n" +
		"fd00::5\tweb-0\n" +
		"# Entries added by HostAliases.\n" +
		"192.0.2.1\tfoo.local\tbar.local\n"
	if got := readFile(t, path); got != want {
		t.Errorf("hosts =\n%s\nwant\n%s", got, want)
	}
	if !strings.Contains(hostsHeader, "127.0.0.1\tlocalhost\n") || !strings.Contains(hostsHeader, "::1\tlocalhost") {
		t.Errorf("hosts header lacks the localhost lines")
	}

	for _, tc := range []struct {
		name     string
		hostname string
		aliases  []HostAlias
	}{
		{"newline in hostname", "web\n10.0.0.1 evil", nil},
		{"alias without IP", "web", []HostAlias{{Hostnames: []string{"a"}}}},
		{"alias without names", "web", []HostAlias{{IP: net.ParseIP("192.0.2.1")}}},
		{"space in alias", "web", []HostAlias{{IP: net.ParseIP("192.0.2.1"), Hostnames: []string{"a b"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := filepath.Join(t.TempDir(), "hosts")
			if err := WriteHosts(bad, tc.hostname, []net.IP{net.ParseIP("10.0.0.2")}, tc.aliases); err == nil {
				t.Errorf("WriteHosts accepted it")
			}
			if _, err := os.Stat(bad); !os.IsNotExist(err) {
				t.Errorf("refused write left %s", bad)
			}
		})
	}
}

func TestWriteHostname(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "hostname")
	if err := WriteHostname(path, "web-0"); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, path); got != "web-0\n" {
		t.Errorf("hostname file = %q, want %q", got, "web-0\n")
	}
	for _, bad := range []string{"", "a\nb", "a b", strings.Repeat("h", 65)} {
		if err := WriteHostname(filepath.Join(dir, "bad"), bad); err == nil {
			t.Errorf("WriteHostname(%q) accepted it", bad)
		}
	}
	// Rewriting replaces the whole file and leaves no temp file.
	if err := WriteHostname(path, "b"); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || readFile(t, path) != "b\n" {
		t.Errorf("after rewrite dir holds %v, hostname %q", entries, readFile(t, path))
	}
}
