package podsandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/conmon"
	"github.com/minicri/minicri/network"
	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/server/validate"
)

// podShmSize is the size of a pod's /dev/shm, as Docker and containerd give it.
const podShmSize = 64 << 20

// Pod is a pod sandbox to make: its new ID and its name, both reserved by
// the caller, its runtime handler and its config, checked by the caller.
type Pod struct {
	ID, Name, Handler string
	Config            *runtime.PodSandboxConfig
}

// Run makes the sandbox's record first (so a crash mid-way is repaired at
// start), then its shared namespaces, files and network, and records it
// ready; on failure it undoes them all. It answers the ready record.
func (c *Controller) Run(ctx context.Context, p Pod) (_ lifecycle.SandboxRecord, retErr error) {
	cfg := p.Config
	raw, err := proto.Marshal(cfg)
	if err != nil {
		return lifecycle.SandboxRecord{}, fmt.Errorf("encode config: %w", err)
	}
	m := cfg.GetMetadata()
	rec := lifecycle.SandboxRecord{
		ID:          p.ID,
		Name:        p.Name,
		Metadata:    lifecycle.PodMetadata{Name: m.GetName(), Namespace: m.GetNamespace(), UID: m.GetUid(), Attempt: m.GetAttempt()},
		Labels:      cfg.GetLabels(),
		Annotations: cfg.GetAnnotations(),
		Handler:     p.Handler,
		CreatedAt:   time.Now().UnixNano(),
		State:       lifecycle.StateCreating,
		Dir:         c.podDir(p.ID),
		Config:      raw,
	}
	// Staged: a killed daemon still finds it (the page cache outlives the
	// process); a crashed machine ends the pins and the infra process
	// anyway, and the sweep of orphans finds the CNI attachment. The ready
	// write below is the durable one.
	if err := lifecycle.StageFirstRecord(ctx, c.deps.Records, p.ID, rec, "sandbox-after-record"); err != nil {
		return lifecycle.SandboxRecord{}, err
	}
	defer lifecycle.UndoOnFailure(ctx, c.deps.Log, &retErr, "pod", p.ID, func(ctx context.Context) error {
		// The local record, not the stored one: when a Put failed (a full
		// disk), only rec knows what was made, e.g. the infra process.
		return c.undo(ctx, &rec)
	})
	// 0700, the pods dir too: the pod's shm below is 1777 (see docs/security.md).
	if err := os.MkdirAll(rec.Dir, 0o700); err != nil {
		return lifecycle.SandboxRecord{}, fmt.Errorf("create pod dir: %w", err)
	}
	// A kill -9 between two steps must leave what to undo findable. The
	// record above names the pod dir, which holds the pins and the shm and
	// the infra process's own record (conmon.RecordedInfra): those need no
	// write of their own. Only the network is recorded before it is made, since nothing
	// else would find it. Only the last record write costs fsyncs (store.Put).
	if err := lifecycle.Step(ctx, lifecycle.StepOf{Phase: "pin", Crash: "sandbox-after-pin"}, func(context.Context) error { return c.pin(&rec, cfg) }); err != nil {
		return lifecycle.SandboxRecord{}, err
	}
	if err := c.dropUnsharedInfra(ctx, &rec, cfg); err != nil {
		return lifecycle.SandboxRecord{}, err
	}
	if sharesPIDNamespace(cfg) && rec.Infra.PID == 0 {
		opts, err := c.deps.InfraOptions(cfg)
		if err != nil {
			return lifecycle.SandboxRecord{}, err
		}
		// At the crash point the infra process is found again only by its
		// pod dir's record.
		var infra conmon.Infra
		if err := lifecycle.Step(ctx, lifecycle.StepOf{Phase: "infra", Crash: "sandbox-infra-unrecorded"}, func(context.Context) (err error) {
			infra, err = c.deps.Infra.StartPause(c.opts.MonitorPath, rec.Dir, opts)
			return err
		}); err != nil {
			return lifecycle.SandboxRecord{}, err
		}
		rec.Infra = infra
		lifecycle.CrashPoint("sandbox-after-infra")
	}
	c.infraLeavesDaemonCgroup(ctx, rec, cfg) // a user namespace's infra too
	var ips []net.IP
	if !HostNetwork(cfg) {
		if ips, err = c.setUpNetwork(ctx, &rec, cfg); err != nil {
			return lifecycle.SandboxRecord{}, err
		}
	}
	// Written once, after CNI ADD: /etc/hosts names the pod's own IP.
	if err := lifecycle.Step(ctx, lifecycle.StepOf{Phase: "files", Crash: "sandbox-before-ready"}, func(context.Context) error { return writePodFiles(rec, cfg, ips) }); err != nil {
		return lifecycle.SandboxRecord{}, err
	}
	if err := c.deps.PluginsRun(ctx, rec); err != nil {
		return lifecycle.SandboxRecord{}, err
	}
	rec.State = lifecycle.StateReady
	if err := lifecycle.Step(ctx, lifecycle.StepOf{Phase: "record"}, func(context.Context) error { return c.deps.Records.Put(p.ID, rec) }); err != nil {
		return lifecycle.SandboxRecord{}, err
	}
	return rec, nil
}

// undo removes what a failed Run made. Unlike a removal, a CNI DEL that
// fails does not keep the rest: the kubelet never retries a sandbox it was
// not given, so the namespace pins, the shm mount, the infra process (and
// its scope, under the systemd driver), the pod dir and the record would
// stay for good, at every retry of the pod (a plugin that refuses the
// config refuses its DEL too). The attachment record that CNI keeps for a
// failed DEL stays instead, and the start-up sweep of attachments without a
// sandbox runs that DEL again.
func (c *Controller) undo(ctx context.Context, rec *lifecycle.SandboxRecord) error {
	netErr := c.teardownNetwork(ctx, rec)
	if netErr != nil {
		rec.NetworkUp = false // the attachment record holds it now
	}
	return errors.Join(netErr, c.remove(ctx, rec))
}

// pin pins the pod's own namespaces and mounts its /dev/shm, noting in r
// what it made. Whatever it fails to finish, release undoes.
func (c *Controller) pin(r *lifecycle.SandboxRecord, cfg *runtime.PodSandboxConfig) error {
	var kinds []network.NamespaceKind
	if u := validate.PodUserNamespace(cfg); u != nil {
		opts, err := c.deps.InfraOptions(cfg)
		if err != nil {
			return err
		}
		if err := c.pinUserNamespace(r, u, cfg, opts); err != nil {
			return err
		}
	} else if !HostNetwork(cfg) {
		// A pod on the host network keeps the host's name too, as the kubelet expects.
		kinds = append(kinds, network.NamespaceNet, network.NamespaceUTS)
	}
	if !HostIPC(cfg) {
		kinds = append(kinds, network.NamespaceIPC)
	}
	if len(kinds) > 0 && r.Namespaces.User == "" {
		ns, err := c.deps.Pins.Pin(filepath.Join(r.Dir, "ns"), kinds, Hostname(cfg))
		if err != nil {
			return fmt.Errorf("pin namespaces: %w", err)
		}
		r.Namespaces = ns
	}
	if HostIPC(cfg) {
		return nil
	}
	shm := filepath.Join(r.Dir, "shm")
	if err := os.MkdirAll(shm, 0o755); err != nil {
		return fmt.Errorf("create shm dir: %w", err)
	}
	if err := c.deps.Pins.MountShm(shm, podShmSize); err != nil {
		return fmt.Errorf("mount pod shm: %w", err)
	}
	r.ShmMounted = true
	return nil
}

// setUpNetwork runs the CNI ADD of the pod's network namespace and notes
// the IPs it gave in rec; it also answers them.
func (c *Controller) setUpNetwork(ctx context.Context, rec *lifecycle.SandboxRecord, cfg *runtime.PodSandboxConfig) ([]net.IP, error) {
	// Record the intent before ADD: a crash during ADD must still lead to a DEL.
	// Staged as the first write: the attachment record that CNI writes
	// durably before its first plugin is what the sweep finds after a
	// crash of the machine.
	rec.NetworkUp = true
	if err := lifecycle.Step(ctx, lifecycle.StepOf{Phase: "record"}, func(context.Context) error { return c.deps.Records.Stage(rec.ID, *rec) }); err != nil {
		return nil, err
	}
	// At the crash point an IP is held that no record names yet.
	var result network.Result
	if err := lifecycle.Step(ctx, lifecycle.StepOf{Phase: "cni", Crash: "sandbox-after-network"}, func(ctx context.Context) (err error) {
		if result, err = c.deps.Network.Setup(ctx, PodNetwork(*rec, cfg)); err != nil {
			return fmt.Errorf("set up pod network: %w", err)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	// Recorded with the sandbox's ready state: until then NetworkUp leads
	// a repair to the DEL that frees the IP.
	rec.IPs = nil
	for _, ip := range result.IPs {
		rec.IPs = append(rec.IPs, ip.String())
	}
	return result.IPs, nil
}

// PodNetwork is what CNI is told of the pod r with config cfg.
func PodNetwork(r lifecycle.SandboxRecord, cfg *runtime.PodSandboxConfig) network.PodNetwork {
	pn := network.PodNetwork{
		ID:           r.ID,
		Name:         r.Metadata.Name,
		Namespace:    r.Metadata.Namespace,
		UID:          r.Metadata.UID,
		NetNS:        r.Namespaces.Net,
		CgroupParent: cfg.GetLinux().GetCgroupParent(),
	}
	for _, p := range cfg.GetPortMappings() {
		pn.PortMappings = append(pn.PortMappings, network.PortMapping{
			Protocol:      p.GetProtocol().String(),
			ContainerPort: p.GetContainerPort(),
			HostPort:      p.GetHostPort(),
			HostIP:        p.GetHostIp(),
		})
	}
	return pn
}

// writePodFiles writes the hostname, hosts and resolv.conf files that every
// container of the pod bind-mounts.
func writePodFiles(r lifecycle.SandboxRecord, cfg *runtime.PodSandboxConfig, ips []net.IP) error {
	if err := network.WriteHostname(filepath.Join(r.Dir, "hostname"), Hostname(cfg)); err != nil {
		return fmt.Errorf("write hostname: %w", err)
	}
	if err := network.WriteHosts(filepath.Join(r.Dir, "hosts"), Hostname(cfg), ips, nil); err != nil {
		return fmt.Errorf("write hosts: %w", err)
	}
	dns := cfg.GetDnsConfig()
	if err := network.WriteResolvConf(filepath.Join(r.Dir, "resolv.conf"), dns.GetServers(), dns.GetSearches(), dns.GetOptions()); err != nil {
		return fmt.Errorf("write resolv.conf: %w", err)
	}
	return nil
}

// Hostname is the pod's hostname: the configured one, else the node's.
// That is containerd's default for every pod, host network or not
// (internal/cri/server/podsandbox/sandbox_run_linux.go setupSandboxFiles
// writes os.Hostname() to /etc/hostname, container_create_linux.go sets it
// as HOSTNAME, and the sandbox's new UTS namespace keeps the node's name).
// The kubelet always sends one for a pod with its own network; crictl,
// critest and CI tools often do not, with pod names longer than a host name
// may be. Should the node's name be unreadable, a DNS label made from the
// pod's name stands in: what a client left out is never an error. The
// result is the same on every call, so /etc/hostname, /etc/hosts, the UTS
// namespace and HOSTNAME agree.
func Hostname(cfg *runtime.PodSandboxConfig) string {
	if h := cfg.GetHostname(); h != "" {
		return h
	}
	if h, err := os.Hostname(); err == nil && h != "" && len(h) <= validate.MaxHostnameLen {
		return h
	}
	return hostnameLabel(cfg.GetMetadata().GetName())
}

// maxLabelLen is the longest DNS label (RFC 1123).
const maxLabelLen = 63

// hostnameLabel turns a pod name into a DNS label: lower case, letters,
// digits and dashes (anything else becomes a dash), at most 63 bytes, no
// dash at either end; "pod" if nothing is left.
func hostnameLabel(name string) string {
	b := make([]byte, 0, min(len(name), maxLabelLen))
	for _, r := range name {
		if len(b) == maxLabelLen {
			break
		}
		switch {
		case r >= 'A' && r <= 'Z':
			b = append(b, byte(r)+'a'-'A')
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b = append(b, byte(r))
		default:
			b = append(b, '-')
		}
	}
	label := strings.Trim(string(b), "-")
	if label == "" {
		return "pod"
	}
	return label
}

// NamespaceOptions are the namespace modes the pod's config asks for.
func NamespaceOptions(cfg *runtime.PodSandboxConfig) *runtime.NamespaceOption {
	return cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
}

// HostNetwork is true for a pod on the node's network.
func HostNetwork(cfg *runtime.PodSandboxConfig) bool {
	return NamespaceOptions(cfg).GetNetwork() == runtime.NamespaceMode_NODE
}

// sharesPIDNamespace is true for a pod whose containers see each other's
// processes (the kubelet's shareProcessNamespace; also the CRI's default).
func sharesPIDNamespace(cfg *runtime.PodSandboxConfig) bool {
	return NamespaceOptions(cfg).GetPid() == runtime.NamespaceMode_POD
}

// HostIPC is true for a pod in the node's IPC namespace.
func HostIPC(cfg *runtime.PodSandboxConfig) bool {
	return NamespaceOptions(cfg).GetIpc() == runtime.NamespaceMode_NODE
}
