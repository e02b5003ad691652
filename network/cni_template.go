package network

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"text/template"
	"text/template/parse"

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
// tmplPath (text/template, bounded: see executeTemplate), as containerd does
// with its conf_template when the kubelet sends the node's pod CIDR. It
// writes only while the directory holds no network config but its own, so
// that a config dropped by the operator or a network add-on is never
// shadowed; written reports whether it wrote. The
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

// A template's run is bounded, where text/template's is not: the kubelet
// calls UpdateRuntimeConfig at every node status sync, and a template that
// ranges over a huge integer would pin a core, or fill memory, each time.
// A CNI config list is a few KB and ranges over a few CIDRs and routes.
const (
	maxTemplateOutput     = 1 << 20
	maxTemplateIterations = 1 << 14
)

var (
	// errTooBig marks a run stopped by those bounds.
	errTooBig = errors.New("the template runs too long")
	// errUnsupported marks what text/template would run but a conf_template
	// may not: {{template}} and {{block}}, whose recursion no bound above
	// would stop in time.
	errUnsupported = errors.New("not supported in a conf_template (docs/networking.md)")
)

// rangeTick is the function run at the start of every range iteration (see
// boundTemplate); a template may call it too, which only counts.
const rangeTick = "minicri_range_tick"

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
	list, err := libcni.NetworkConfFromBytes(out)
	if err == nil {
		err = validateNetwork(list)
	}
	if err != nil {
		return nil, fmt.Errorf("cni conf_template %s: the result is not a network config list: %w", path, err)
	}
	return out, nil
}

// executeTemplate runs text/template, with missingkey=error, on values,
// within the bounds above.
func executeTemplate(name, text string, values TemplateValues) ([]byte, error) {
	iterations := 0
	tick := func() (string, error) {
		if iterations++; iterations > maxTemplateIterations {
			return "", fmt.Errorf("over %d range iterations: %w", maxTemplateIterations, errTooBig)
		}
		return "", nil
	}
	t, err := template.New(name).Option("missingkey=error").Funcs(template.FuncMap{rangeTick: tick}).Parse(text)
	if err != nil {
		return nil, err
	}
	if t.Tree == nil {
		return nil, fmt.Errorf("template %s is empty", name)
	}
	if err := boundTemplate(t.Tree, t.Tree.Root); err != nil {
		return nil, err
	}
	out := &cappedWriter{max: maxTemplateOutput}
	if err := t.Execute(out, values); err != nil {
		return nil, err
	}
	return out.buf.Bytes(), nil
}

// boundTemplate refuses {{template}} and makes every range iteration call
// rangeTick first. Only the tree's range bodies can repeat (there is no
// other loop and no recursion without {{template}}), so counting them bounds
// the run: text/template has no other hook into a run, and a range over an
// integer writes nothing for the output cap to stop.
func boundTemplate(tree *parse.Tree, node parse.Node) error {
	switch n := node.(type) {
	case *parse.ListNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Nodes {
			if err := boundTemplate(tree, c); err != nil {
				return err
			}
		}
	case *parse.IfNode:
		return boundBranch(tree, &n.BranchNode)
	case *parse.WithNode:
		return boundBranch(tree, &n.BranchNode)
	case *parse.RangeNode:
		if err := boundBranch(tree, &n.BranchNode); err != nil {
			return err
		}
		call := &parse.CommandNode{NodeType: parse.NodeCommand, Pos: n.Pos, Args: []parse.Node{parse.NewIdentifier(rangeTick).SetPos(n.Pos)}}
		pipe := &parse.PipeNode{NodeType: parse.NodePipe, Pos: n.Pos, Line: n.Line, Cmds: []*parse.CommandNode{call}}
		n.List.Nodes = append([]parse.Node{&parse.ActionNode{NodeType: parse.NodeAction, Pos: n.Pos, Line: n.Line, Pipe: pipe}}, n.List.Nodes...)
	case *parse.TemplateNode:
		location, context := tree.ErrorContext(n)
		return fmt.Errorf("template: %s: %s: %w", location, context, errUnsupported)
	}
	return nil
}

func boundBranch(tree *parse.Tree, b *parse.BranchNode) error {
	if err := boundTemplate(tree, b.List); err != nil {
		return err
	}
	return boundTemplate(tree, b.ElseList)
}

// cappedWriter keeps what a template writes and fails the write that would
// take it over max bytes, which stops text/template's run.
type cappedWriter struct {
	buf bytes.Buffer
	max int
}

func (w *cappedWriter) Write(p []byte) (int, error) {
	if w.buf.Len()+len(p) > w.max {
		return 0, fmt.Errorf("output over %d bytes: %w", w.max, errTooBig)
	}
	return w.buf.Write(p)
}
