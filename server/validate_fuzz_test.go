package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/image"
	"github.com/minicri/minicri/network"
	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/server/internal/testreq"
	"github.com/minicri/minicri/server/podsandbox"
	"github.com/minicri/minicri/server/validate"
)

// The fuzz targets feed arbitrary protobuf bytes, as anyone on the socket
// could send them, through the request validators. Besides never panicking,
// what the validators accept must be safe to act on: a log path stays in the
// pod's log directory, mounts name clean absolute paths, the stop signal
// parses, and the pod's DNS servers cannot inject lines into resolv.conf.
// The seed corpora are under testdata/fuzz; `go test` runs them every time.

func FuzzValidateContainerConfig(f *testing.F) {
	for _, c := range []*runtime.ContainerConfig{testreq.Container(), {}, {Metadata: &runtime.ContainerMetadata{}}} {
		b, _ := proto.Marshal(c)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var c runtime.ContainerConfig
		if proto.Unmarshal(data, &c) != nil {
			return
		}
		if validate.ContainerConfig(&c, false) != nil {
			return
		}
		checkAcceptedContainerConfig(t, &c)
	})
}

func checkAcceptedContainerConfig(t *testing.T, c *runtime.ContainerConfig) {
	const logDir = "/var/log/pods/ns_pod_uid"
	sb := &runtime.PodSandboxConfig{LogDirectory: logDir}
	if p := containerLogPath(sb, c); p != "" && !strings.HasPrefix(p, logDir+"/") {
		t.Fatalf("accepted log_path %q leads to %q, outside %s", c.GetLogPath(), p, logDir)
	}
	for _, m := range ociMounts(c.GetMounts(), nil) {
		for _, p := range []string{m.ContainerPath, m.HostPath} {
			if p != "" && (!filepath.IsAbs(p) || hasDotDot(p)) {
				t.Fatalf("accepted mount path %q", p)
			}
		}
	}
	if _, err := parseSignal(stopSignal(c, image.Image{})); err != nil {
		t.Fatalf("accepted stop signal %v does not parse: %v", c.GetStopSignal(), err)
	}
	_ = ociResources(c.GetLinux().GetResources())
	_ = ociSecurity(c.GetLinux().GetSecurityContext())
	_ = ociDevices(c.GetDevices())
}

func FuzzValidateSandboxConfig(f *testing.F) {
	for _, c := range []*runtime.PodSandboxConfig{testreq.Sandbox(), {}, {Metadata: &runtime.PodSandboxMetadata{}}} {
		b, _ := proto.Marshal(c)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var c runtime.PodSandboxConfig
		if proto.Unmarshal(data, &c) != nil {
			return
		}
		if validate.SandboxConfig(&c, false) != nil {
			return
		}
		checkAcceptedSandboxConfig(t, &c)
	})
}

func checkAcceptedSandboxConfig(t *testing.T, c *runtime.PodSandboxConfig) {
	if d := c.GetLogDirectory(); d != "" && (!filepath.IsAbs(d) || hasDotDot(d)) {
		t.Fatalf("accepted log_directory %q", d)
	}
	_ = podsandbox.PodNetwork(lifecycle.SandboxRecord{ID: strings.Repeat("a", 64)}, c)
	dns := c.GetDnsConfig()
	path := filepath.Join(t.TempDir(), "resolv.conf")
	if err := network.WriteResolvConf(path, dns.GetServers(), dns.GetSearches(), dns.GetOptions()); err != nil {
		return // refused by the writer: safe too
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(data), "nameserver "); len(dns.GetServers()) > 0 && got != len(dns.GetServers()) {
		t.Fatalf("%d servers accepted, resolv.conf has %d nameserver lines:\n%s", len(dns.GetServers()), got, data)
	}
}

// FuzzValidateID: an ID the requests' check accepts is a plain file name.
// The Makefile's FUZZ_TARGETS runs it by this name.
func FuzzValidateID(f *testing.F) {
	for _, s := range []string{strings.Repeat("ab", 32), "abc", "", "../etc", "ABC", "a b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if !isID(id) {
			return
		}
		// An accepted ID is used as a file name under the state root.
		if filepath.Base(id) != id || id == "." || id == ".." || strings.ContainsAny(id, "/\x00 \n") {
			t.Fatalf("accepted ID %q is not a plain file name", id)
		}
	})
}

func hasDotDot(p string) bool {
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return true
		}
	}
	return false
}
