package network

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// containerdTemplate is the shape of containerd's documented conf_template
// example: the fields it fills must work here unchanged.
const containerdTemplate = `{
  "cniVersion": "1.0.0",
  "name": "tmpl",
  "plugins": [{
    "type": "bridge", "bridge": "cni0", "isGateway": true,
    "ipam": {
      "type": "host-local",
      "ranges": [{{range $i, $r := .PodCIDRRanges}}{{if $i}}, {{end}}[{"subnet": "{{$r}}"}]{{end}}],
      "routes": [{{range $i, $r := .Routes}}{{if $i}}, {{end}}{"dst": "{{$r}}"}{{end}}]
    }
  }],
  "x-first": "{{.PodCIDR}}"
}`

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestNewTemplateValues(t *testing.T) {
	cases := []struct {
		cidrs  []string
		routes []string
	}{
		{[]string{"10.88.0.0/16"}, []string{"0.0.0.0/0"}},
		{[]string{"fd00::/64"}, []string{"::/0"}},
		{[]string{"10.88.0.0/16", "fd00::/64"}, []string{"0.0.0.0/0", "::/0"}},
	}
	for _, c := range cases {
		v := NewTemplateValues(c.cidrs)
		if v.PodCIDR != c.cidrs[0] || !reflect.DeepEqual(v.PodCIDRRanges, c.cidrs) || !reflect.DeepEqual(v.Routes, c.routes) {
			t.Errorf("NewTemplateValues(%v) = %+v, want routes %v", c.cidrs, v, c.routes)
		}
	}
}

func TestWriteConfFromTemplate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "net.d") // not made yet: written on demand
	tmpl := filepath.Join(t.TempDir(), "template.json")
	writeFile(t, tmpl, containerdTemplate)
	c := NewCNI(dir, nil, t.TempDir(), nil)
	if err := c.Ready(); !errors.Is(err, ErrNotReady) {
		t.Fatalf("Ready with no config = %v, want ErrNotReady", err)
	}

	written, err := c.WriteConfFromTemplate(tmpl, NewTemplateValues([]string{"10.88.0.0/16", "fd00::/64"}))
	if err != nil || !written {
		t.Fatalf("WriteConfFromTemplate = %v, %v; want written", written, err)
	}
	data, err := os.ReadFile(filepath.Join(dir, TemplateConfFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`[{"subnet": "10.88.0.0/16"}], [{"subnet": "fd00::/64"}]`, `{"dst": "0.0.0.0/0"}, {"dst": "::/0"}`, `"x-first": "10.88.0.0/16"`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("written config lacks %s:\n%s", want, data)
		}
	}
	// Loaded at once, not after the directory's timestamp tick.
	if list, err := c.network(); err != nil || list.Name != "tmpl" {
		t.Fatalf("network after the write = %v, %v; want tmpl", list, err)
	}

	// Ours again, same values: nothing to write. New values: rewritten.
	if written, err := c.WriteConfFromTemplate(tmpl, NewTemplateValues([]string{"10.88.0.0/16", "fd00::/64"})); err != nil || written {
		t.Errorf("same values again = %v, %v; want nothing written", written, err)
	}
	if written, err := c.WriteConfFromTemplate(tmpl, NewTemplateValues([]string{"10.99.0.0/16"})); err != nil || !written {
		t.Errorf("new CIDR = %v, %v; want ours rewritten", written, err)
	}

	// Someone else's config: never shadowed, ours left as it was.
	writeFile(t, filepath.Join(dir, "05-operator.conflist"), `{"cniVersion":"1.0.0","name":"op","plugins":[{"type":"bridge"}]}`)
	before, _ := os.ReadFile(filepath.Join(dir, TemplateConfFile))
	if written, err := c.WriteConfFromTemplate(tmpl, NewTemplateValues([]string{"10.77.0.0/16"})); err != nil || written {
		t.Errorf("with an operator's config = %v, %v; want nothing written", written, err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, TemplateConfFile)); string(after) != string(before) {
		t.Errorf("our file changed while another config was in place")
	}
}

func TestWriteConfFromTemplateRefusesBadTemplates(t *testing.T) {
	cases := map[string]struct{ content, says string }{
		"no such file":          {"", "no such file"},
		"template syntax":       {`{"name": "{{.PodCIDR"}`, `template.json:1: bad character U+0022 '"'`},
		"unknown field":         {`{"name": "{{.NodeName}}"}`, `template.json:1:12: executing "template.json" at <.NodeName>: can't evaluate field NodeName`},
		"unknown function":      {`{"name": "{{nosuch .PodCIDR}}"}`, `template.json:1: function "nosuch" not defined`},
		"unsupported construct": {"{\n{{define \"x\"}}{{end}}{{template \"x\"}}", `template.json:2:32: {{template "x"}}: not supported`},
		"not a network list":    {`{"subnet": "{{.PodCIDR}}"}`, "not a network config list"},
	}
	for name, tc := range cases {
		content := tc.content
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			tmpl := filepath.Join(t.TempDir(), "template.json")
			if content != "" {
				writeFile(t, tmpl, content)
			}
			c := NewCNI(dir, nil, t.TempDir(), nil)
			written, err := c.WriteConfFromTemplate(tmpl, NewTemplateValues([]string{"10.88.0.0/16"}))
			if written || !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), tmpl) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("WriteConfFromTemplate = %v, %v; want ErrNotReady naming %s and saying %q, and nothing written", written, err, tmpl, tc.says)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("a bad template left %d files in the config directory", len(entries))
			}
		})
	}
}
