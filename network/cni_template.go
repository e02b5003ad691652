package network

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/containernetworking/cni/libcni"

	"github.com/minicri/minicri/internal/atomicfile"
)

// TemplateConfFile is the network config WriteConfFromTemplate writes in
// the config directory: containerd's 10-containerd-net.conflist, renamed.
const TemplateConfFile = "10-minicri-net.conflist"

// TemplateValues are what a config template may use, the fields of
// containerd's cniConfigTemplate (internal/cri/server/update_runtime_config.go)
// so that a template written for containerd works unchanged.
type TemplateValues struct {
	PodCIDR       string   // the first of the node's pod CIDRs
	PodCIDRRanges []string // all of them, as the kubelet sent them
	Routes        []string // 0.0.0.0/0 and/or ::/0, one per address family present
}

// NewTemplateValues derives the template's values from the node's pod
// CIDRs, which the caller has checked.
func NewTemplateValues(cidrs []string) TemplateValues {
	v := TemplateValues{PodCIDRRanges: cidrs}
	if len(cidrs) > 0 {
		v.PodCIDR = cidrs[0]
	}
	var v4, v6 bool
	for _, c := range cidrs {
		if ip, _, err := net.ParseCIDR(c); err == nil && ip.To4() != nil {
			v4 = true
		} else if err == nil {
			v6 = true
		}
	}
	if v4 {
		v.Routes = append(v.Routes, "0.0.0.0/0")
	}
	if v6 {
		v.Routes = append(v.Routes, "::/0")
	}
	return v
}

// WriteConfFromTemplate writes TemplateConfFile from the Go template file
// tmplPath (text/template's syntax, see cni_template_eval.go), as containerd does with its conf_template when the kubelet
// sends the node's pod CIDR. It writes only while the directory holds no
// network config but its own, so that a config dropped by the operator or a
// network add-on is never shadowed; written reports whether it wrote. The
// result must parse as a network config, or nothing is written. The next
// Ready or Setup loads it. Errors wrap ErrNotReady: the network stays as it
// was, and the template is the operator's to fix.
func (c *CNI) WriteConfFromTemplate(tmplPath string, values TemplateValues) (written bool, err error) {
	ours := filepath.Join(c.confDir, TemplateConfFile)
	files, err := libcni.ConfFiles(c.confDir, confExtensions)
	if err != nil && !os.IsNotExist(err) {
		return false, fmt.Errorf("%w: read network config directory: %w", ErrNotReady, err)
	}
	for _, f := range files {
		if f != ours {
			c.log.WithField("file", f).Debug("cni: a network config is in place; conf_template not used")
			return false, nil
		}
	}
	data, err := renderTemplate(tmplPath, values)
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrNotReady, err)
	}
	if old, err := os.ReadFile(ours); err == nil && bytes.Equal(old, data) {
		return false, nil
	}
	if err := os.MkdirAll(c.confDir, 0o755); err != nil {
		return false, fmt.Errorf("%w: create network config directory: %w", ErrNotReady, err)
	}
	if err := atomicfile.Write(ours, data, 0o644); err != nil {
		return false, fmt.Errorf("%w: %w", ErrNotReady, err)
	}
	// Loaded now rather than at the next stat: the directory's stamp may
	// not have moved within its timestamp tick.
	c.mu.Lock()
	c.loaded = nil
	c.mu.Unlock()
	c.log.WithFields(map[string]any{"file": ours, "template": tmplPath, "podCIDR": values.PodCIDR}).Info("cni: network config written from conf_template")
	return true, nil
}

// renderTemplate executes the template and checks that the result is a
// network config list this package would load.
func renderTemplate(path string, values TemplateValues) ([]byte, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cni conf_template: %w", err)
	}
	out, err := executeTemplate(filepath.Base(path), string(text), values)
	if err != nil {
		return nil, fmt.Errorf("cni conf_template %s: %w", path, err)
	}
	list, err := libcni.NetworkConfFromBytes([]byte(out))
	if err == nil {
		err = validateNetwork(list)
	}
	if err != nil {
		return nil, fmt.Errorf("cni conf_template %s: the result is not a network config list: %w", path, err)
	}
	return []byte(out), nil
}
