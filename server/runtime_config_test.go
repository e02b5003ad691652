package server

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/network"
	"github.com/minicri/minicri/server/internal/testreq"
)

func TestParsePodCIDRs(t *testing.T) {
	cases := []struct {
		raw  string
		want string // joined by ","; "" means refused
	}{
		{"10.88.0.0/16", "10.88.0.0/16"},
		{"10.88.0.0/16, fd00:10::/64", "10.88.0.0/16,fd00:10::/64"},
		{"10.88.0.0", ""},
		{"10.88.0.0/33", ""},
		{"pods", ""},
		{"10.88.0.0/16,", ""},
		{"10.1.0.0/16,10.2.0.0/16,10.3.0.0/16", ""},
		{"10.88.0.0/16\n", ""},
	}
	for _, c := range cases {
		got, err := parsePodCIDRs("runtime_config.network_config.pod_cidr", c.raw)
		if c.want == "" {
			testreq.CheckValidation(t, err, "runtime_config.network_config.pod_cidr")
			continue
		}
		if err != nil || strings.Join(got, ",") != c.want {
			t.Errorf("parsePodCIDRs(%q) = %v, %v; want %s", c.raw, got, err, c.want)
		}
	}
}

// newRuntimeConfigServer is a Server with a state root, a CNI config dir and
// (when tmpl is set) a conf_template of its own.
func newRuntimeConfigServer(t *testing.T, root, confDir, tmpl string) *Server {
	t.Helper()
	s := newRecordsServer(t)
	s.cfg.Root = root
	s.cfg.CNI.ConfDir = confDir
	s.cfg.CNI.ConfTemplate = tmpl
	s.useCNI(network.NewCNI(confDir, nil, t.TempDir(), nil))
	if err := s.restoreRuntimeConfig(); err != nil {
		t.Fatal(err)
	}
	return s
}

func updatePodCIDR(s *Server, cidr string) error {
	_, err := s.UpdateRuntimeConfig(context.Background(), &runtime.UpdateRuntimeConfigRequest{
		RuntimeConfig: &runtime.RuntimeConfig{NetworkConfig: &runtime.NetworkConfig{PodCidr: cidr}}})
	return err
}

func statusPodCIDR(t *testing.T, s *Server) string {
	t.Helper()
	resp, err := s.Status(context.Background(), &runtime.StatusRequest{Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	var cidr string
	if err := json.Unmarshal([]byte(resp.GetInfo()["podCIDR"]), &cidr); err != nil {
		t.Fatalf("Status info podCIDR %q: %v", resp.GetInfo()["podCIDR"], err)
	}
	return cidr
}

func TestUpdateRuntimeConfigKeepsThePodCIDR(t *testing.T) {
	root, confDir := t.TempDir(), t.TempDir()
	s := newRuntimeConfigServer(t, root, confDir, "")
	if err := updatePodCIDR(s, ""); err != nil {
		t.Fatalf("empty CIDR: %v, want a no-op", err)
	}
	if got := statusPodCIDR(t, s); got != "" {
		t.Errorf("pod CIDR after an empty update = %q, want none", got)
	}
	if err := updatePodCIDR(s, "10.88.0.0/16"); err != nil {
		t.Fatal(err)
	}
	err := updatePodCIDR(s, "10.88.0.0")
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "runtime_config.network_config.pod_cidr:") {
		t.Errorf("malformed CIDR = %v, want InvalidArgument naming runtime_config.network_config.pod_cidr", err)
	}
	if err := updatePodCIDR(s, ""); err != nil {
		t.Fatal(err)
	}
	if got := statusPodCIDR(t, s); got != "10.88.0.0/16" {
		t.Errorf("pod CIDR = %q, want 10.88.0.0/16 kept through a bad and an empty update", got)
	}
	// Without a template, minicri writes no network config.
	if entries, _ := os.ReadDir(confDir); len(entries) != 0 {
		t.Errorf("without conf_template the config dir got %d files", len(entries))
	}

	restarted := newRuntimeConfigServer(t, root, confDir, "")
	if got := statusPodCIDR(t, restarted); got != "10.88.0.0/16" {
		t.Errorf("pod CIDR after a restart = %q, want 10.88.0.0/16", got)
	}
}

func TestUpdateRuntimeConfigWritesTheTemplate(t *testing.T) {
	root, confDir := t.TempDir(), filepath.Join(t.TempDir(), "net.d")
	tmpl := filepath.Join(t.TempDir(), "cni.tmpl")
	if err := os.WriteFile(tmpl, []byte(`{"cniVersion":"1.0.0","name":"tmpl","plugins":[{"type":"bridge","ipam":{"type":"host-local","subnet":"{{.PodCIDR}}"}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	s := newRuntimeConfigServer(t, root, confDir, tmpl)
	if err := updatePodCIDR(s, "10.88.0.0/16"); err != nil {
		t.Fatal(err)
	}
	ours := filepath.Join(confDir, network.TemplateConfFile)
	data, err := os.ReadFile(ours)
	if err != nil || !strings.Contains(string(data), `"subnet":"10.88.0.0/16"`) {
		t.Fatalf("written config = %s, %v; want the CIDR filled in", data, err)
	}
	// Gone (a wiped /etc/cni/net.d): a restarted daemon writes it again from the kept CIDR.
	if err := os.Remove(ours); err != nil {
		t.Fatal(err)
	}
	newRuntimeConfigServer(t, root, confDir, tmpl)
	if _, err := os.Stat(ours); err != nil {
		t.Errorf("config not written again at start: %v", err)
	}

	// A broken template is the node's condition: FailedPrecondition, not Internal.
	if err := os.WriteFile(tmpl, []byte(`{{.Nope`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := updatePodCIDR(s, "10.99.0.0/16"); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("broken template = %v, want FailedPrecondition", err)
	}
}
