package podsandbox

import (
	"os"
	"regexp"
	"strings"
	"testing"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestHostname(t *testing.T) {
	node, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("a-very-long-pod-name-", 5) // 105 bytes
	cases := []struct {
		name string
		cfg  *runtime.PodSandboxConfig
		want string
	}{
		{"configured", &runtime.PodSandboxConfig{Hostname: "web-0", Metadata: &runtime.PodSandboxMetadata{Name: long}}, "web-0"},
		// As containerd: the node's name when the config has none.
		{"none, long pod name", &runtime.PodSandboxConfig{Metadata: &runtime.PodSandboxMetadata{Name: long}}, node},
		{"none, host network", &runtime.PodSandboxConfig{Metadata: &runtime.PodSandboxMetadata{Name: "p"},
			Linux: &runtime.LinuxPodSandboxConfig{SecurityContext: &runtime.LinuxSandboxSecurityContext{NamespaceOptions: &runtime.NamespaceOption{Network: runtime.NamespaceMode_NODE}}}}, node},
	}
	for _, c := range cases {
		if got := Hostname(c.cfg); got != c.want {
			t.Errorf("%s: Hostname = %q, want %q", c.name, got, c.want)
		}
	}
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

func TestHostnameLabel(t *testing.T) {
	cases := map[string]string{
		"web-0":                        "web-0",
		"Web_Server.1":                 "web-server-1",
		"-lead-and-trail-":             "lead-and-trail",
		"___":                          "pod",
		"":                             "pod",
		strings.Repeat("x", 100):       strings.Repeat("x", 63),
		strings.Repeat("a", 62) + "-b": strings.Repeat("a", 62), // cut at 63, then the dash goes
		"ünïcode":                      "n-code",
	}
	for in, want := range cases {
		got := hostnameLabel(in)
		if got != want {
			t.Errorf("hostnameLabel(%q) = %q, want %q", in, got, want)
		}
		if !dnsLabel.MatchString(got) {
			t.Errorf("hostnameLabel(%q) = %q, not a DNS label", in, got)
		}
	}
}
