package fake

import (
	"context"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/minicri/minicri/network"
)

// Network attaches pods to a pretend network, one IP each.
type Network struct {
	Failures
	mu       sync.Mutex
	next     byte
	attached map[string]network.PodNetwork // by pod ID
	// Templates counts the CNI configs written from a template.
	Templates int
	// OnSetup, when set, runs at the start of every Setup: a test holds a
	// RunPodSandbox there, its sandbox still being made.
	OnSetup func(network.PodNetwork)
}

func NewNetwork() *Network { return &Network{attached: map[string]network.PodNetwork{}} }

func (n *Network) Setup(ctx context.Context, pn network.PodNetwork) (network.Result, error) {
	if n.OnSetup != nil {
		n.OnSetup(pn)
	}
	if err := n.err("Setup"); err != nil {
		return network.Result{}, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.next++
	n.attached[pn.ID] = pn
	return network.Result{IPs: []net.IP{net.IPv4(10, 88, 0, n.next)}, Interface: "eth0"}, nil
}

// Teardown detaches a pod; one that is not attached is fine, as with CNI DEL.
func (n *Network) Teardown(ctx context.Context, pn network.PodNetwork) error {
	return n.locked("Teardown", &n.mu, func() {
		delete(n.attached, pn.ID)
	})
}

func (n *Network) Ready() error { return n.err("Ready") }

// AttachedPods lists the pods attached now.
func (n *Network) AttachedPods() ([]string, error) {
	if err := n.err("AttachedPods"); err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Sorted(maps.Keys(n.attached)), nil
}

func (n *Network) WriteConfFromTemplate(tmplPath string, values network.TemplateValues) (bool, error) {
	if err := n.err("WriteConfFromTemplate"); err != nil {
		return false, err
	}
	if tmplPath == "" {
		return false, nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.Templates++
	return true, nil
}

// Pins pins namespaces as empty files and mounts shm as nothing at all.
type Pins struct {
	Failures
	mu     sync.Mutex
	pinned map[string]bool // namespace files
	shm    map[string]bool
}

func NewPins() *Pins { return &Pins{pinned: map[string]bool{}, shm: map[string]bool{}} }

func (p *Pins) Pin(dir string, kinds []network.NamespaceKind, hostname string) (network.Namespaces, error) {
	if err := p.err("Pin"); err != nil {
		return network.Namespaces{}, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return network.Namespaces{}, err
	}
	ns := network.Namespaces{Dir: dir}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, k := range kinds {
		path := filepath.Join(dir, string(k))
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			return network.Namespaces{}, err
		}
		p.pinned[path] = true
		switch k {
		case network.NamespaceNet:
			ns.Net = path
		case network.NamespaceIPC:
			ns.IPC = path
		case network.NamespaceUTS:
			ns.UTS = path
		}
	}
	return ns, nil
}

// Unpin releases the namespaces; those not pinned are fine.
func (p *Pins) Unpin(ns network.Namespaces) error {
	return p.locked("Unpin", &p.mu, func() {
		for _, path := range []string{ns.Net, ns.IPC, ns.UTS} {
			if path != "" {
				delete(p.pinned, path)
				os.Remove(path)
			}
		}
	})
}

func (p *Pins) MountShm(path string, size int) error {
	return p.locked("MountShm", &p.mu, func() {
		p.shm[path] = true
	})
}

func (p *Pins) UnmountShm(path string) error {
	return p.locked("UnmountShm", &p.mu, func() {
		delete(p.shm, path)
	})
}

// Held counts the namespaces pinned and the shm mounts made, not released.
func (p *Pins) Held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pinned) + len(p.shm)
}

// Attached counts the pods attached now.
func (n *Network) Attached() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.attached)
}
