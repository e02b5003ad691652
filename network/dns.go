package network

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strings"

	"github.com/minicri/minicri/internal/atomicfile"
)

// HostAlias is an extra line of a pod's /etc/hosts (the pod's hostAliases).
type HostAlias struct {
	IP        net.IP
	Hostnames []string
}

// podFileMode is the mode of a pod's resolv.conf, hosts and hostname:
// containers of any user read them. They are replaced by rename without
// fsync: they live in the run dir, which does not outlive a reboot anyway.
const podFileMode = 0o644

// hostResolvConf is the file a pod without DNS settings gets a copy of.
const hostResolvConf = "/etc/resolv.conf"

// WriteResolvConf writes a pod's resolv.conf. With no servers, searches or
// options at all it copies the host's /etc/resolv.conf, as containerd does:
// that is what the kubelet's "Default" DNS policy expects when it has no
// resolver file of its own to pass. The kubelet already applies the search
// list limits; here each value must be one non-empty word, since a space
// would split it and a newline would inject a line.
//
// Like the other pod files it is replaced by rename, so a crash never leaves
// half a file; a container that already bind-mounted the old file keeps it.
func WriteResolvConf(path string, servers, searches, options []string) error {
	return writeResolvConf(path, hostResolvConf, servers, searches, options)
}

// writeResolvConf is WriteResolvConf with the host's file at hostFile.
func writeResolvConf(path, hostFile string, servers, searches, options []string) error {
	if len(servers)+len(searches)+len(options) == 0 {
		return copyHostResolvConf(path, hostFile)
	}
	for _, group := range []struct {
		what   string
		values []string
	}{{"nameserver", servers}, {"search domain", searches}, {"resolver option", options}} {
		for _, v := range group.values {
			if err := checkWord(group.what, v); err != nil {
				return fmt.Errorf("write %s: %w", path, err)
			}
		}
	}
	var b strings.Builder
	if len(searches) > 0 {
		fmt.Fprintf(&b, "search %s\n", strings.Join(searches, " "))
	}
	for _, s := range servers {
		fmt.Fprintf(&b, "nameserver %s\n", s)
	}
	if len(options) > 0 {
		fmt.Fprintf(&b, "options %s\n", strings.Join(options, " "))
	}
	return atomicfile.Replace(path, []byte(b.String()), podFileMode)
}

// copyHostResolvConf copies the host's file; a host without one gives an
// empty file, with which the resolver falls back to a local server, as on
// the host itself.
func copyHostResolvConf(path, hostFile string) error {
	data, err := os.ReadFile(hostFile)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("write %s: read host resolv.conf: %w", path, err)
	}
	return atomicfile.Replace(path, data, podFileMode)
}

// hostsHeader are the lines every pod's /etc/hosts starts with, the same
// the kubelet writes for the pods it manages the file of.
const hostsHeader = `# Kubernetes-managed hosts file.
127.0.0.1	localhost
::1	localhost ip6-localhost ip6-loopback
fe00::0	ip6-localnet
fe00::0	ip6-mcastprefix
fe00::1	ip6-allnodes
fe00::2	ip6-allrouters
`

// WriteHosts writes a pod's /etc/hosts: localhost lines, each pod IP mapped
// to hostname, then the host aliases.
func WriteHosts(path, hostname string, ips []net.IP, extra []HostAlias) error {
	var b strings.Builder
	b.WriteString(hostsHeader)
	if hostname != "" {
		if err := checkWord("hostname", hostname); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		for _, ip := range ips {
			fmt.Fprintf(&b, "%s\t%s\n", ip, hostname)
		}
	}
	if len(extra) > 0 {
		b.WriteString("# Entries added by HostAliases.\n")
	}
	for _, alias := range extra {
		line, err := aliasLine(alias)
		if err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		b.WriteString(line)
	}
	return atomicfile.Replace(path, []byte(b.String()), podFileMode)
}

func aliasLine(alias HostAlias) (string, error) {
	if alias.IP == nil {
		return "", errors.New("host alias without an IP")
	}
	if len(alias.Hostnames) == 0 {
		return "", fmt.Errorf("host alias %s without hostnames", alias.IP)
	}
	for _, h := range alias.Hostnames {
		if err := checkWord("host alias", h); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("%s\t%s\n", alias.IP, strings.Join(alias.Hostnames, "\t")), nil
}

// WriteHostname writes a pod's /etc/hostname.
func WriteHostname(path, hostname string) error {
	if err := checkWord("hostname", hostname); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if len(hostname) > hostNameMax {
		return fmt.Errorf("write %s: hostname %q longer than %d bytes", path, hostname, hostNameMax)
	}
	return atomicfile.Replace(path, []byte(hostname+"\n"), podFileMode)
}

// checkWord refuses a value that would not stay one word on its line:
// empty, or holding a space, a newline, a NUL or another control character.
func checkWord(what, v string) error {
	if v == "" {
		return fmt.Errorf("empty %s", what)
	}
	for _, r := range v {
		if r <= ' ' || r == 0x7f {
			return fmt.Errorf("%s %q: must not contain whitespace or control characters", what, v)
		}
	}
	return nil
}
