package network

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/utils"
	"github.com/sirupsen/logrus"

	"github.com/minicri/minicri/internal/tracing"
)

// ErrNotReady is wrapped by every error that says why pods cannot get a
// network yet: no config, an unreadable one, a missing plugin binary.
var ErrNotReady = errors.New("cni network not ready")

// PodInterface is the interface CNI creates in every pod's network namespace.
const PodInterface = "eth0"

// rollbackTimeout bounds the DEL that undoes a failed ADD. It runs on a
// context of its own: the caller's may be what expired.
const rollbackTimeout = time.Minute

// PodNetwork is what CNI needs to know about one pod.
type PodNetwork struct {
	ID           string // sandbox ID: the CNI container ID
	Name         string // pod name
	Namespace    string // pod namespace
	UID          string // pod UID
	NetNS        string // pinned network namespace file
	PortMappings []PortMapping
	Bandwidth    *Bandwidth // nil: no shaping
	CgroupParent string     // the pod's cgroup, for plugins that ask for it
}

// PortMapping exposes a pod port on the host (the portmap plugin's
// "portMappings" capability). Mappings without a HostPort are not passed on.
type PortMapping struct {
	Protocol      string // tcp (default), udp or sctp, any case
	ContainerPort int32
	HostPort      int32
	HostIP        string // empty: all host addresses
}

// Bandwidth limits a pod's traffic (the bandwidth plugin's "bandwidth"
// capability), in bits per second and bits.
type Bandwidth struct {
	IngressRate  uint64
	IngressBurst uint64
	EgressRate   uint64
	EgressBurst  uint64
}

// Result is the part of a CNI result a pod's status needs.
type Result struct {
	IPs       []net.IP // pod addresses, IPv4 first; IPs[0] is the primary one
	Interface string   // the interface holding them, PodInterface
}

// CNI runs the first network config of a directory for pods. It is safe for
// concurrent use; Setup and Teardown of one pod must not overlap (the server
// serialises calls per sandbox).
type CNI struct {
	confDir     string
	binDirs     []string
	lib         *libcni.CNIConfig
	exec        *pluginExec
	cacheDir    string
	attachments attachmentStore
	log         logrus.FieldLogger

	mu     sync.Mutex
	loaded *loadedNetwork
}

// NewCNI returns a CNI that reads its network config from confDir, finds
// plugins in binDirs, and keeps libcni's result cache and its own attachment
// records under cacheDir (which must survive a daemon restart: put it in the
// state root). Plugins' stderr goes to log at debug level; log may be nil.
func NewCNI(confDir string, binDirs []string, cacheDir string, log logrus.FieldLogger) *CNI {
	if log == nil {
		discard := logrus.New()
		discard.SetOutput(io.Discard)
		log = discard
	}
	exec := &pluginExec{stderr: pluginStderr{log}}
	return &CNI{
		exec:        exec,
		cacheDir:    cacheDir,
		confDir:     confDir,
		binDirs:     binDirs,
		lib:         libcni.NewCNIConfigWithCacheDir(binDirs, cacheDir, exec),
		attachments: attachmentStore{dir: filepath.Join(cacheDir, "attachments")},
		log:         log,
	}
}

// pluginStderr passes what plugins print on stderr to the log.
type pluginStderr struct{ log logrus.FieldLogger }

func (w pluginStderr) Write(p []byte) (int, error) {
	w.log.Debugf("cni plugin stderr: %s", strings.TrimSpace(string(p)))
	return len(p), nil
}

// Ready returns nil when pods can get a network, or an error wrapping
// ErrNotReady that says why (for the NetworkReady condition of Status). The
// config is read again only when the directory or the chosen file changed.
func (c *CNI) Ready() error {
	_, err := c.network()
	return err
}

// network returns the current config, reloading it when it changed.
func (c *CNI) network() (*libcni.NetworkConfigList, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.loaded.unchanged(c.confDir, time.Now()) {
		prev := c.loaded
		c.loaded = c.load()
		c.logLoad(prev, c.loaded)
	}
	return c.loaded.list, c.loaded.err
}

// load reads the config directory and settles the CNI version the network
// runs at (cni_version.go).
func (c *CNI) load() *loadedNetwork {
	l := loadNetwork(c.confDir)
	l.stampBinDirs(c.binDirs)
	if l.err != nil {
		return l
	}
	pv, err := c.askPluginVersions(l.list)
	if err != nil {
		l.retryAt = time.Now().Add(versionRetry)
	}
	var v string
	if err == nil {
		v, err = chooseVersion(l.versions, pv)
	}
	if err == nil && v != l.list.CNIVersion {
		l.list.CNIVersion = v
		l.list, err = inlineNetwork(l.list)
	}
	if err != nil {
		l.list, l.err = nil, fmt.Errorf("%w: network config %s: %w", ErrNotReady, l.file, err)
	}
	return l
}

// logLoad tells of a load that differs from the one before: why the
// network does not load, or the version it runs at when that is not the
// highest the file declares. A config that still fails the same way is not
// logged again.
func (c *CNI) logLoad(prev, l *loadedNetwork) {
	log := c.log.WithField("file", l.file)
	if l.err != nil {
		if prev == nil || prev.err == nil || prev.err.Error() != l.err.Error() {
			log.WithError(l.err).Warn("cni: pods get no network")
		}
		return
	}
	if declared := l.versions[len(l.versions)-1]; declared != l.list.CNIVersion {
		if prev == nil || prev.list == nil || prev.file != l.file || prev.list.CNIVersion != l.list.CNIVersion {
			log.Infof("cni network %s runs at CNI version %s, the highest of those it declares (%s) that every plugin speaks",
				l.list.Name, l.list.CNIVersion, strings.Join(l.versions, ", "))
		}
		return
	}
	log.Debugf("cni network %s loaded", l.list.Name)
}

// Setup attaches the pod's network namespace to the network (CNI ADD) and
// returns its addresses. A failed Setup runs DEL, so that no IP, veth or
// iptables rule stays; if even that DEL fails, the attachment stays recorded
// and a later Teardown retries it.
func (c *CNI) Setup(ctx context.Context, pn PodNetwork) (Result, error) {
	if err := pn.validate(); err != nil {
		return Result{}, fmt.Errorf("cni setup: %w", err)
	}
	if pn.NetNS == "" {
		return Result{}, fmt.Errorf("cni setup of pod %s: no network namespace", pn.ID)
	}
	list, err := c.network()
	if err != nil {
		return Result{}, err
	}
	if _, missing := c.findPlugins(list); len(missing) > 0 {
		return Result{}, fmt.Errorf("%w: plugin %s not found in %s", ErrNotReady, strings.Join(missing, ", "), strings.Join(c.binDirs, ":"))
	}
	// A record left by a Setup that never finished (a crash, or a rollback
	// whose DEL failed) is undone first: a second ADD for the same ID would
	// be refused by IPAM, or leak the first address.
	if err := c.teardown(ctx, pn.ID, ""); err != nil {
		return Result{}, fmt.Errorf("cni setup of pod %s: undo earlier attachment: %w", pn.ID, err)
	}

	att := newAttachment(list, pn)
	if err := c.attachments.write(pn.ID, att); err != nil {
		return Result{}, err
	}
	res, err := c.add(ctx, list, pn.ID, att)
	if err != nil {
		c.rollback(ctx, pn.ID, att)
		return Result{}, fmt.Errorf("cni add of pod %s to network %s: %w", pn.ID, list.Name, err)
	}
	return res, nil
}

func (c *CNI) add(ctx context.Context, list *libcni.NetworkConfigList, podID string, att *attachment) (_ Result, err error) {
	ctx, span := tracing.Start(ctx, "cni.add", tracing.PodID.String(podID), tracing.CNINetwork.String(list.Name))
	defer func() { tracing.End(span, err) }()
	raw, err := c.lib.AddNetworkList(ctx, list, att.runtimeConf(podID, att.NetNS))
	if err != nil {
		return Result{}, err
	}
	return podResult(raw, att.IfName)
}

// rollback undoes a failed ADD on a context of its own.
func (c *CNI) rollback(ctx context.Context, podID string, att *attachment) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	if err := c.del(ctx, podID, att, att.NetNS); err != nil {
		c.log.WithError(err).WithField("pod", podID).Warn("cni: undo of a failed setup failed; a later teardown retries it")
		return
	}
	if err := c.attachments.remove(podID); err != nil {
		c.log.WithError(err).WithField("pod", podID).Warn("cni: undo of a failed setup")
	}
}

// Teardown detaches the pod from the network (CNI DEL) with the config and
// arguments its Setup used, even if the config directory changed since. It
// is idempotent: a pod with no recorded attachment (never set up, or already
// torn down, before or after a daemon restart) returns nil without running a
// plugin, so DEL takes effect once. Only pn.ID and pn.NetNS are used; when
// the namespace is no longer pinned, DEL runs with an empty CNI_NETNS as the
// CNI spec asks, which still releases the IP.
func (c *CNI) Teardown(ctx context.Context, pn PodNetwork) error {
	if err := utils.ValidateContainerID(pn.ID); err != nil {
		return fmt.Errorf("cni teardown: pod ID %q: %w", pn.ID, err)
	}
	return c.teardown(ctx, pn.ID, pn.NetNS)
}

// teardown runs DEL for podID's recorded attachment, in netns if given, else
// in the namespace recorded at Setup, or none if that is no longer pinned.
func (c *CNI) teardown(ctx context.Context, podID, netns string) error {
	att, err := c.attachments.read(podID)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if errors.Is(err, errBadRecord) {
		// Records are written by rename, so this is tampering, not a crash.
		// Without the config nothing can be deleted, and failing forever
		// would block the pod's removal: drop the record and say so.
		c.log.WithError(err).WithField("pod", podID).Warn("cni: unreadable attachment record dropped; DEL not run")
		return c.attachments.remove(podID)
	}
	if err != nil {
		return fmt.Errorf("cni teardown of pod %s: %w", podID, err)
	}
	if netns == "" {
		netns = att.NetNS
	}
	if !NamespacePinned(netns) {
		netns = ""
	}
	if err := c.del(ctx, podID, att, netns); err != nil {
		return fmt.Errorf("cni del of pod %s: %w", podID, err)
	}
	return c.attachments.remove(podID)
}

// del runs DEL for a recorded attachment. A plugin whose binary has gone is
// skipped with a warning: DEL could never succeed otherwise, and the pod
// could never be removed, while the other plugins still free what they hold.
func (c *CNI) del(ctx context.Context, podID string, att *attachment, netns string) (err error) {
	ctx, span := tracing.Start(ctx, "cni.del", tracing.PodID.String(podID))
	defer func() { tracing.End(span, err) }()
	list, err := libcni.NetworkConfFromBytes(att.Network)
	if err != nil {
		return fmt.Errorf("recorded network config: %w", err)
	}
	present, missing := c.findPlugins(list)
	if len(missing) > 0 {
		c.log.WithField("pod", podID).Warnf("cni: plugin %s not found, DEL skips it", strings.Join(missing, ", "))
		list.Plugins = present
	}
	return c.lib.DelNetworkList(ctx, list, att.runtimeConf(podID, netns))
}

// AttachedPods returns the IDs of the pods whose network is set up, or whose
// Setup was interrupted: at start-up, the server tears down those it has no
// sandbox for.
func (c *CNI) AttachedPods() ([]string, error) {
	return c.attachments.list()
}

// findPlugins splits the plugins of list into those whose binary is in the
// plugin directories and the types of those whose binary is not.
func (c *CNI) findPlugins(list *libcni.NetworkConfigList) (present []*libcni.PluginConfig, missing []string) {
	for _, p := range list.Plugins {
		if _, err := invoke.FindInPath(p.Network.Type, c.binDirs); err != nil {
			missing = append(missing, p.Network.Type)
		} else {
			present = append(present, p)
		}
	}
	return present, missing
}

// newAttachment builds the arguments of ADD as the kubelet's runtimes pass
// them: CNI_ARGS with the pod's identity, capabilities in runtimeConfig.
func newAttachment(list *libcni.NetworkConfigList, pn PodNetwork) *attachment {
	return &attachment{
		Network: list.Bytes,
		IfName:  PodInterface,
		NetNS:   pn.NetNS,
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", pn.Namespace},
			{"K8S_POD_NAME", pn.Name},
			{"K8S_POD_INFRA_CONTAINER_ID", pn.ID},
			{"K8S_POD_UID", pn.UID},
		},
		CapabilityArgs: pn.capabilityArgs(),
	}
}

// portMapEntry is one element of the "portMappings" capability.
type portMapEntry struct {
	HostPort      int32  `json:"hostPort"`
	ContainerPort int32  `json:"containerPort"`
	Protocol      string `json:"protocol"`
	HostIP        string `json:"hostIP,omitempty"`
}

// bandwidthEntry is the "bandwidth" capability.
type bandwidthEntry struct {
	IngressRate  uint64 `json:"ingressRate,omitempty"`
	IngressBurst uint64 `json:"ingressBurst,omitempty"`
	EgressRate   uint64 `json:"egressRate,omitempty"`
	EgressBurst  uint64 `json:"egressBurst,omitempty"`
}

func (pn PodNetwork) capabilityArgs() map[string]any {
	args := map[string]any{}
	var ports []portMapEntry
	for _, pm := range pn.PortMappings {
		if pm.HostPort <= 0 {
			continue // the kubelet lists every container port; only these are mapped
		}
		ports = append(ports, portMapEntry{pm.HostPort, pm.ContainerPort, protocolName(pm.Protocol), pm.HostIP})
	}
	if len(ports) > 0 {
		args["portMappings"] = ports
	}
	if b := pn.Bandwidth; b != nil {
		args["bandwidth"] = bandwidthEntry{b.IngressRate, b.IngressBurst, b.EgressRate, b.EgressBurst}
	}
	if pn.CgroupParent != "" {
		args["cgroupPath"] = pn.CgroupParent
	}
	return args
}

func protocolName(p string) string {
	if p == "" {
		return "tcp"
	}
	return strings.ToLower(p)
}

// validate refuses what would break CNI_ARGS (";" separates its pairs) or a
// plugin's port rules, before any plugin runs.
func (pn PodNetwork) validate() error {
	if err := utils.ValidateContainerID(pn.ID); err != nil {
		return fmt.Errorf("pod ID %q: %w", pn.ID, err)
	}
	for field, v := range map[string]string{"name": pn.Name, "namespace": pn.Namespace, "UID": pn.UID} {
		if strings.ContainsAny(v, ";\x00\n") {
			return fmt.Errorf("pod %s %q: must not contain ';', NUL or newline", field, v)
		}
	}
	for _, pm := range pn.PortMappings {
		if err := pm.validate(); err != nil {
			return err
		}
	}
	return nil
}

func (pm PortMapping) validate() error {
	if pm.HostPort <= 0 {
		return nil
	}
	switch protocolName(pm.Protocol) {
	case "tcp", "udp", "sctp":
	default:
		return fmt.Errorf("port mapping %d: protocol %q is not tcp, udp or sctp", pm.HostPort, pm.Protocol)
	}
	if pm.HostPort > 65535 || pm.ContainerPort <= 0 || pm.ContainerPort > 65535 {
		return fmt.Errorf("port mapping %d->%d: port out of range", pm.HostPort, pm.ContainerPort)
	}
	if pm.HostIP != "" && net.ParseIP(pm.HostIP) == nil {
		return fmt.Errorf("port mapping %d: host IP %q is not an IP address", pm.HostPort, pm.HostIP)
	}
	return nil
}

// podResult picks the addresses given to interfaces inside the pod (a
// bridge plugin also reports the host's bridge and veth), IPv4 first as the
// kubelet expects the primary address to be on single-stack clusters.
func podResult(raw types.Result, ifName string) (Result, error) {
	res, err := types100.NewResultFromResult(raw)
	if err != nil {
		return Result{}, fmt.Errorf("read cni result: %w", err)
	}
	var v4, v6 []net.IP
	for _, ipc := range res.IPs {
		if !inPod(res, ipc) {
			continue
		}
		if ip4 := ipc.Address.IP.To4(); ip4 != nil {
			v4 = append(v4, ip4)
		} else {
			v6 = append(v6, ipc.Address.IP)
		}
	}
	return Result{IPs: append(v4, v6...), Interface: ifName}, nil
}

// inPod reports whether an address belongs to an interface in the pod's
// namespace. Plugins may leave the interface index out; such addresses are
// taken as the pod's.
func inPod(res *types100.Result, ipc *types100.IPConfig) bool {
	if ipc.Interface == nil {
		return true
	}
	i := *ipc.Interface
	return i >= 0 && i < len(res.Interfaces) && res.Interfaces[i].Sandbox != ""
}
