package server

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
	"github.com/minicri/minicri/oci"
	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/server/validate"
	"github.com/minicri/minicri/store"
)

// podNetworking attaches pods to the pod network and detaches them
// (*network.CNI); AttachedPods lists them for the start-up sweep.
type podNetworking interface {
	Setup(ctx context.Context, pn network.PodNetwork) (network.Result, error)
	Teardown(ctx context.Context, pn network.PodNetwork) error
	AttachedPods() ([]string, error)
}

// sandboxPins pins a pod's shared namespaces and mounts its /dev/shm: the
// parts of a sandbox that need root (hostPins).
type sandboxPins interface {
	Pin(dir string, kinds []network.NamespaceKind, hostname string) (network.Namespaces, error)
	Unpin(ns network.Namespaces) error
	MountShm(path string, size int) error
	UnmountShm(path string) error
}

// podInfra runs the infra process of a pod that shares its PID namespace
// (conmon).
type podInfra interface {
	StartPause(binary, podDir string, opts conmon.PauseOptions) (conmon.Infra, error)
	StopPause(ctx context.Context, in conmon.Infra) error
}

// runtimeSet is the OCI runtimes by RuntimeClass handler (*oci.Handlers).
type runtimeSet interface {
	// Get returns the runtime of handler; "" is the default handler.
	Get(handler string) (ociRuntime, error)
	Names() []string
}

// ociRuntime is one OCI runtime (*oci.Runtime) in all the roles the
// handlers declare beside themselves; a function that needs only one takes
// only that one.
type ociRuntime interface {
	containerRuntime // container_stop.go
	resourceUpdater  // container_update.go
	processExecer    // container_exec.go
	runtimeProbe     // status.go
	monitorRuntime   // container_monitor.go
	containerCheckpointer
}

// podShmSize is the size of a pod's /dev/shm, as Docker and containerd give it.
const podShmSize = 64 << 20

// RunPodSandbox makes a pod's shared namespaces, files and network. The
// namespaces are pinned as files, so no pause image is needed; only a pod
// that shares its PID namespace gets an infra process (minicri-pause), to
// be that namespace's init.
func (s *Server) RunPodSandbox(ctx context.Context, req *runtime.RunPodSandboxRequest) (*runtime.RunPodSandboxResponse, error) {
	cfg := req.GetConfig()
	if err := validate.SandboxConfig(cfg, hostSELinux()); err != nil {
		return nil, toStatus(err)
	}
	if err := s.checkHostPorts(cfg); err != nil {
		return nil, toStatus(err)
	}
	handler, err := s.handlerName(req.GetRuntimeHandler())
	if err != nil {
		return nil, toStatus(err)
	}
	if err := s.checkHandlerAvailable(handler); err != nil {
		return nil, toStatus(err)
	}
	if err := s.validatePodUserNamespace(cfg, handler); err != nil {
		return nil, toStatus(err)
	}
	if err := s.validateCgroupParent(cfg); err != nil {
		return nil, toStatus(err)
	}
	defer s.nri.BlockSync()()
	id := lifecycle.NewID()
	releaseIDs, err := s.claimHostIDs(id, cfg)
	if err != nil {
		return nil, toStatus(err)
	}
	defer releaseIDs()
	name := lifecycle.SandboxName(cfg.GetMetadata())
	if err := s.sandboxNames.Reserve(name, id); err != nil {
		var reserved *store.ReservedError
		if errors.As(err, &reserved) {
			return nil, toStatus(markf(store.ErrNameReserved, "pod sandbox %s is already taken by sandbox %s", name, reserved.Owner))
		}
		return nil, toStatus(err)
	}
	// The object comes first: its lock is held before the record is made.
	sb := s.sandboxes.Add(id)
	sb.lock.Lock()
	defer sb.lock.Unlock()
	ctx, phases := lifecycle.WithPhases(ctx, s.metrics, "RunPodSandbox")
	defer phases.Observe()
	if err := s.createSandbox(ctx, id, name, handler, cfg); err != nil {
		s.sandboxes.Forget(id) // the undo did unless the record was never made or is kept
		s.sandboxNames.Release(name, id)
		return nil, toStatus(fmt.Errorf("run pod sandbox %s: %w", cfg.GetMetadata().GetName(), err))
	}
	// As containerd: both, with the sandbox's ID as the container's.
	rec, _ := s.sandboxes.Get(id) // under the lock: as createSandbox left it
	s.podTransition(ctx, sb, rec, created)
	s.podTransition(ctx, sb, rec, started)
	return &runtime.RunPodSandboxResponse{PodSandboxId: id}, nil
}

// createSandbox makes the sandbox's record first (so a crash mid-way is
// repaired at start), then its resources; on failure it undoes them all.
func (s *Server) createSandbox(ctx context.Context, id, name, handler string, cfg *runtime.PodSandboxConfig) (retErr error) {
	raw, err := proto.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("encode config: %w", err)
	}
	m := cfg.GetMetadata()
	rec := lifecycle.SandboxRecord{
		ID:          id,
		Name:        name,
		Metadata:    lifecycle.PodMetadata{Name: m.GetName(), Namespace: m.GetNamespace(), UID: m.GetUid(), Attempt: m.GetAttempt()},
		Labels:      cfg.GetLabels(),
		Annotations: cfg.GetAnnotations(),
		Handler:     handler,
		CreatedAt:   time.Now().UnixNano(),
		State:       lifecycle.StateCreating,
		Dir:         filepath.Join(s.cfg.RunDir, "pods", id),
		Config:      raw,
	}
	// Staged: a killed daemon still finds it (the page cache outlives the
	// process); a crashed machine ends the pins and the infra process
	// anyway, and the sweep of orphans finds the CNI attachment. The ready
	// write below is the durable one.
	if err := lifecycle.StageFirstRecord(ctx, s.sandboxes, id, rec, "sandbox-after-record"); err != nil {
		return err
	}
	defer s.undoOnFailure(ctx, &retErr, "pod", id, func(ctx context.Context) error {
		// The local record, not the stored one: when a Put failed (a full
		// disk), only rec knows what was made, e.g. the infra process.
		return s.undoSandbox(ctx, &rec)
	})
	// 0700, the pods dir too: the pod's shm below is 1777 (see docs/security.md).
	if err := os.MkdirAll(rec.Dir, 0o700); err != nil {
		return fmt.Errorf("create pod dir: %w", err)
	}
	// A kill -9 between two steps must leave what to undo findable. The
	// record above names the pod dir, which holds the pins and the shm and
	// the infra process's own record (conmon.RecordedInfra): those need no
	// write of their own. Only the network is recorded before it is made, since nothing
	// else would find it. Only the last record write costs fsyncs (store.Put).
	if err := lifecycle.Step(ctx, lifecycle.StepOf{Phase: "pin", Crash: "sandbox-after-pin"}, func(context.Context) error { return s.pinSandbox(&rec, cfg) }); err != nil {
		return err
	}
	if err := s.dropUnsharedInfra(ctx, &rec, cfg); err != nil {
		return err
	}
	if sharesPIDNamespace(cfg) && rec.Infra.PID == 0 {
		opts, err := pauseOptions(cfg)
		if err != nil {
			return err
		}
		// At the crash point the infra process is found again only by its
		// pod dir's record.
		var infra conmon.Infra
		if err := lifecycle.Step(ctx, lifecycle.StepOf{Phase: "infra", Crash: "sandbox-infra-unrecorded"}, func(context.Context) (err error) {
			infra, err = s.infra.StartPause(s.monitorPath, rec.Dir, opts)
			return err
		}); err != nil {
			return err
		}
		rec.Infra = infra
		lifecycle.CrashPoint("sandbox-after-infra")
	}
	s.infraLeavesDaemonCgroup(ctx, rec, cfg) // a user namespace's infra too
	var ips []net.IP
	if !hostNetwork(cfg) {
		if ips, err = s.setUpNetwork(ctx, &rec, cfg); err != nil {
			return err
		}
	}
	// Written once, after CNI ADD: /etc/hosts names the pod's own IP.
	if err := lifecycle.Step(ctx, lifecycle.StepOf{Phase: "files", Crash: "sandbox-before-ready"}, func(context.Context) error { return writePodFiles(rec, cfg, ips) }); err != nil {
		return err
	}
	if err := s.nriRunPodSandbox(ctx, rec); err != nil {
		return err
	}
	rec.State = lifecycle.StateReady
	return lifecycle.Step(ctx, lifecycle.StepOf{Phase: "record"}, func(context.Context) error { return s.sandboxes.Put(id, rec) })
}

// undoSandbox removes what a failed RunPodSandbox made. Unlike a removal,
// a CNI DEL that fails does not keep the rest: the kubelet never retries a
// sandbox it was not given, so the namespace pins, the shm mount, the
// infra process (and its scope, under the systemd driver), the pod dir and
// the record would stay for good, at every retry of the pod (a plugin that
// refuses the config refuses its DEL too). The attachment record that CNI
// keeps for a failed DEL stays instead, and the start-up sweep of
// attachments without a sandbox runs that DEL again.
func (s *Server) undoSandbox(ctx context.Context, rec *lifecycle.SandboxRecord) error {
	netErr := s.teardownNetwork(ctx, rec)
	if netErr != nil {
		rec.NetworkUp = false // the attachment record holds it now
	}
	return errors.Join(netErr, s.removeSandbox(ctx, rec))
}

// pinSandbox pins the pod's own namespaces and mounts its /dev/shm, noting
// in r what it made. Whatever it fails to finish, releaseSandbox undoes.
func (s *Server) pinSandbox(r *lifecycle.SandboxRecord, cfg *runtime.PodSandboxConfig) error {
	var kinds []network.NamespaceKind
	if u := validate.PodUserNamespace(cfg); u != nil {
		opts, err := pauseOptions(cfg)
		if err != nil {
			return err
		}
		if err := s.pinUserNamespace(r, u, cfg, opts); err != nil {
			return err
		}
	} else if !hostNetwork(cfg) {
		// A pod on the host network keeps the host's name too, as the kubelet expects.
		kinds = append(kinds, network.NamespaceNet, network.NamespaceUTS)
	}
	if !hostIPC(cfg) {
		kinds = append(kinds, network.NamespaceIPC)
	}
	if len(kinds) > 0 && r.Namespaces.User == "" {
		ns, err := s.pins.Pin(filepath.Join(r.Dir, "ns"), kinds, podHostname(cfg))
		if err != nil {
			return fmt.Errorf("pin namespaces: %w", err)
		}
		r.Namespaces = ns
	}
	if hostIPC(cfg) {
		return nil
	}
	shm := filepath.Join(r.Dir, "shm")
	if err := os.MkdirAll(shm, 0o755); err != nil {
		return fmt.Errorf("create shm dir: %w", err)
	}
	if err := s.pins.MountShm(shm, podShmSize); err != nil {
		return fmt.Errorf("mount pod shm: %w", err)
	}
	r.ShmMounted = true
	return nil
}

// setUpNetwork runs the CNI ADD of the pod's network namespace and notes
// the IPs it gave in rec; it also answers them.
func (s *Server) setUpNetwork(ctx context.Context, rec *lifecycle.SandboxRecord, cfg *runtime.PodSandboxConfig) ([]net.IP, error) {
	// Record the intent before ADD: a crash during ADD must still lead to a DEL.
	// Staged as the first write: the attachment record that CNI writes
	// durably before its first plugin is what the sweep finds after a
	// crash of the machine.
	rec.NetworkUp = true
	if err := lifecycle.Step(ctx, lifecycle.StepOf{Phase: "record"}, func(context.Context) error { return s.sandboxes.Stage(rec.ID, *rec) }); err != nil {
		return nil, err
	}
	// At the crash point an IP is held that no record names yet.
	var result network.Result
	if err := lifecycle.Step(ctx, lifecycle.StepOf{Phase: "cni", Crash: "sandbox-after-network"}, func(ctx context.Context) (err error) {
		if result, err = s.cni.Setup(ctx, podNetwork(*rec, cfg)); err != nil {
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

func podNetwork(r lifecycle.SandboxRecord, cfg *runtime.PodSandboxConfig) network.PodNetwork {
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
	if err := network.WriteHostname(filepath.Join(r.Dir, "hostname"), podHostname(cfg)); err != nil {
		return fmt.Errorf("write hostname: %w", err)
	}
	if err := network.WriteHosts(filepath.Join(r.Dir, "hosts"), podHostname(cfg), ips, nil); err != nil {
		return fmt.Errorf("write hosts: %w", err)
	}
	dns := cfg.GetDnsConfig()
	if err := network.WriteResolvConf(filepath.Join(r.Dir, "resolv.conf"), dns.GetServers(), dns.GetSearches(), dns.GetOptions()); err != nil {
		return fmt.Errorf("write resolv.conf: %w", err)
	}
	return nil
}

// podHostname is the pod's hostname: the configured one, else the node's.
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
func podHostname(cfg *runtime.PodSandboxConfig) string {
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

func namespaceOptions(cfg *runtime.PodSandboxConfig) *runtime.NamespaceOption {
	return cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
}

func hostNetwork(cfg *runtime.PodSandboxConfig) bool {
	return namespaceOptions(cfg).GetNetwork() == runtime.NamespaceMode_NODE
}

// sharesPIDNamespace is true for a pod whose containers see each other's
// processes (the kubelet's shareProcessNamespace; also the CRI's default).
func sharesPIDNamespace(cfg *runtime.PodSandboxConfig) bool {
	return namespaceOptions(cfg).GetPid() == runtime.NamespaceMode_POD
}

func hostIPC(cfg *runtime.PodSandboxConfig) bool {
	return namespaceOptions(cfg).GetIpc() == runtime.NamespaceMode_NODE
}

// handlerName resolves a RuntimeClass handler; empty means the default one.
func (s *Server) handlerName(name string) (string, error) {
	if name == "" {
		return s.cfg.Runtime.DefaultHandler, nil
	}
	if _, ok := s.cfg.Runtime.Handlers[name]; !ok {
		return "", validate.Invalidf("runtime_handler", "no runtime handler %q is configured", name)
	}
	return name, nil
}

// pauseOptions confine a pod's infra process as its containers are: under
// the pod's AppArmor profile (the default one unless the pod names another
// or is privileged) on an AppArmor host.
func pauseOptions(cfg *runtime.PodSandboxConfig) (conmon.PauseOptions, error) {
	sc := cfg.GetLinux().GetSecurityContext()
	typ, name := securityProfile(sc.GetApparmor(), "", oci.ProfileUnconfined, "runtime/default")
	profile, err := oci.InfraAppArmorProfile(oci.AppArmorProfile{Type: typ, LocalhostName: name}, sc.GetPrivileged())
	if err != nil {
		return conmon.PauseOptions{}, fmt.Errorf("the pod's infra process: %w", err)
	}
	return conmon.PauseOptions{AppArmorProfile: profile}, nil
}
