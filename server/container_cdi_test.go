package server

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/config"
	"github.com/minicri/minicri/oci"
	"github.com/minicri/minicri/server/internal/testreq"
)

func cdiTestServer(t *testing.T, enabled bool) *Server {
	t.Helper()
	dir := t.TempDir()
	spec := `{"cdiVersion": "0.6.0", "kind": "example.com/test", "devices": [
	  {"name": "a", "containerEdits": {"env": ["A=1"]}},
	  {"name": "b", "containerEdits": {"env": ["B=1"]}}]}`
	if err := os.WriteFile(filepath.Join(dir, "test.json"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.CDI = config.CDIConfig{Enabled: enabled, SpecDirs: []string{dir}}
	return &Server{cfg: cfg, cdi: oci.NewCDI(cfg.CDI.SpecDirs), log: quietLog()}
}

func TestResolveCDIDevices(t *testing.T) {
	cases := []struct {
		name        string
		disabled    bool
		devices     []string
		annotations map[string]string
		want        []string
		field       string // the field an error names; "" means no error
	}{
		{name: "none asked", want: nil},
		{name: "field then annotations, once each", devices: []string{"example.com/test=b"},
			annotations: map[string]string{"cdi.k8s.io/x": "example.com/test=a,example.com/test=b", "other": "example.com/test=zzz"},
			want:        []string{"example.com/test=b", "example.com/test=a"}},
		{name: "unknown in the field", devices: []string{"example.com/test=a", "example.com/test=nope"}, field: "config.CDI_devices"},
		{name: "unknown in an annotation", annotations: map[string]string{"cdi.k8s.io/plugin_dev": "example.com/test=nope"},
			field: "config.annotations[cdi.k8s.io/plugin_dev]"},
		{name: "disabled", disabled: true, devices: []string{"example.com/test=a"}, field: "config.CDI_devices"},
		{name: "disabled, nothing asked", disabled: true, want: nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := cdiTestServer(t, !c.disabled)
			cfg := &runtime.ContainerConfig{Annotations: c.annotations}
			for _, d := range c.devices {
				cfg.CDIDevices = append(cfg.CDIDevices, &runtime.CDIDevice{Name: d})
			}
			got, err := s.resolveCDIDevices(cfg)
			testreq.CheckValidation(t, err, c.field)
			if c.field == "" && !slices.Equal(got, c.want) {
				t.Errorf("devices = %v, want %v", got, c.want)
			}
		})
	}
}
