// Package server is where the CRI meets minicri: it implements the runtime.v1
// RuntimeService and ImageService over the packages below it, and it is the
// only package that knows gRPC and the CRI types. Each RPC (or small family of
// RPCs) has its own file named after it.
package server

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/config"
	"github.com/minicri/minicri/conmon"
	"github.com/minicri/minicri/image"
	"github.com/minicri/minicri/internal/broadcast"
	"github.com/minicri/minicri/internal/kernelfeat"
	"github.com/minicri/minicri/metrics"
	"github.com/minicri/minicri/network"
	"github.com/minicri/minicri/nri"
	"github.com/minicri/minicri/oci"
	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/server/podsandbox"
	"github.com/minicri/minicri/store"
	"github.com/minicri/minicri/streaming"
)

// RuntimeName is what Version reports as the runtime's name.
const RuntimeName = "minicri"

// Options are what the daemon hands the server at start.
type Options struct {
	Config  config.Config
	Version string
	Log     *logrus.Entry
	// Metrics, when not nil, gets the server's counts and timings.
	Metrics *metrics.Metrics
	// Hooks are what a test may replace; the zero value is the daemon's.
	Hooks Hooks
	// Node is what the defaults that follow the node (cgroup_driver)
	// follow; nil: config.ThisNode(), looked at once in New.
	Node *config.Node
}

// Hooks are the server's seams: a field left zero takes the real thing.
type Hooks struct {
	// ProcessAlive reports whether pid is still the process that started
	// at start (ticks since boot): a monitor or infra process, never a
	// reused pid. Default conmon.Alive; a handler test's fake monitors
	// have no processes.
	ProcessAlive func(pid int, start uint64) bool
	// SlowReap is how long after SIGKILL a container's exit is worth a
	// log line (default killGrace).
	SlowReap time.Duration
	// WatchRetryFirst and WatchRetryMax are the waits between the tries
	// of a watch that failed while its monitor lives (default 100 ms,
	// doubling up to 5 s).
	WatchRetryFirst, WatchRetryMax time.Duration
}

// processAlive is Hooks.ProcessAlive or conmon.Alive.
func (h Hooks) processAlive(pid int, start uint64) bool {
	if h.ProcessAlive != nil {
		return h.ProcessAlive(pid, start)
	}
	return conmon.Alive(pid, start)
}

// slowReap is Hooks.SlowReap or killGrace.
func (h Hooks) slowReap() time.Duration {
	return cmp.Or(h.SlowReap, killGrace)
}

// watchRetry is the wait before a watch's try after tries failed ones.
func (h Hooks) watchRetry(tries int) time.Duration {
	first, most := cmp.Or(h.WatchRetryFirst, 100*time.Millisecond), cmp.Or(h.WatchRetryMax, 5*time.Second)
	return min(first<<min(tries, 16), most)
}

// Server implements the CRI. RPCs not built yet fall through to the embedded
// Unimplemented servers, which answer codes.Unimplemented naming the RPC.
type Server struct {
	runtime.UnimplementedRuntimeServiceServer
	runtime.UnimplementedImageServiceServer

	cfg     config.Config
	version string
	log     *logrus.Entry
	hooks   Hooks
	// cgroupDriver is the driver in force and how it was chosen; New puts
	// its Driver in cfg.CgroupDriver, which every path reads.
	cgroupDriver config.CgroupDriverChoice

	// sandboxes and containers hold each sandbox's and container's object
	// (objects.go), its record and all else kept of it in memory; see
	// locks.go for the lock discipline.
	sandboxes      *store.Table[lifecycle.SandboxRecord, *sandbox]
	containers     *store.Table[lifecycle.ContainerRecord, *container]
	sandboxNames   *store.Names
	containerNames *store.Names
	cni            podNetworking
	cniConf        networkConfig
	images         imageStore
	policy         imagePolicy                   // judges an image for a namespace's pods at create
	reloaded       atomic.Pointer[config.Config] // s.cfg with the keys the last Reload changed; nil: none
	pinned         atomic.Pointer[image.Pinned]  // image.pinned_images: reported pinned, kept by the kubelet's image GC; Reload swaps it
	rootfs         rootfsStore
	mounts         rootfsMounter
	usage          diskUsage
	diffs          rootfsDiffer // a container's rootfs diff, for its checkpoint
	criu           criuProbe    // whether checkpoints can work here
	runtimes       runtimeSet
	pins           podsandbox.Pins  // a pod's namespaces and shm
	monitor        containerMonitor // starts the monitors (conmon)
	sockets        monitorSockets   // attach and log reopening on a running monitor
	infra          podsandbox.Infra // infra processes of pods sharing a PID namespace
	scopes         processScopes    // systemd driver: scopes for the infra processes and monitors; nil otherwise
	monitorPath    string
	monitors       *monitorPlacement
	streams        *streaming.Server // exec, attach and port-forward URLs
	cdi            *oci.CDI

	// missingControllers holds the cgroup controllers already logged as
	// missing (see warnMissingControllers).
	missingControllers sync.Map
	netConfig          netConfig // the node's pod CIDR, from UpdateRuntimeConfig

	// events feeds GetContainerEvents (see transition).
	events broadcast.Hub[*runtime.ContainerEventResponse]

	metrics *metrics.Metrics // nil: not collected
	// nri relays pods' and containers' lifecycle to NRI plugins; nil when
	// NRI is off (server/nri.go).
	nri *nri.NRI
	// rootfsStage is where user-namespaced containers' runtimes find
	// their rootfs, and sysStage the host's /sys of those on the host's
	// network (container_userns.go).
	rootfsStage, sysStage string
	// pods makes, stops, removes and repairs the pod sandboxes
	// (sandbox_controller.go).
	pods *podsandbox.Controller
	// afterStart runs, afterStartDelay after the start, what the start
	// leaves for later (runAfterStart); Close stops it, or waits for
	// afterStartDone if it has begun.
	afterStart     *time.Timer
	afterStartDone chan struct{}
}

// orphanPluginWait bounds the start's wait for CNI plugins a killed daemon
// left running: an ADD or DEL takes well under a second; one that takes
// longer is hung, and is logged and left.
const orphanPluginWait = 10 * time.Second

// New builds the server and starts its streaming server, which Close stops.
// It starts nothing that outlives the daemon.
func New(opts Options) (*Server, error) {
	cfg := opts.Config
	driver, err := cgroupDriver(cfg.CgroupDriver, opts.Node, opts.Log)
	if err != nil {
		return nil, err
	}
	cfg.CgroupDriver = driver.Driver
	s := &Server{
		cfg:            cfg,
		cgroupDriver:   driver,
		version:        opts.Version,
		log:            opts.Log,
		hooks:          opts.Hooks,
		metrics:        opts.Metrics,
		sandboxNames:   store.NewNames(),
		containerNames: store.NewNames(),
		monitors:       newMonitorPlacement(cfg.Runtime.MonitorShare),
		cdi:            oci.NewCDI(cfg.CDI.SpecDirs),
		criu:           &oci.CRIU{ScratchDir: filepath.Join(cfg.Root, checkpointsDir)},
	}
	// The start's phases, in minicri_operation_phase_duration_seconds as
	// operation Start: make bench shows where a restart goes.
	ctx, phases := lifecycle.WithPhases(context.Background(), s.metrics, "Start")
	s.useMonitor(conmonMonitor{})
	if cfg.CgroupDriver == config.SystemdDriver {
		s.scopes = &oci.SystemdScopes{}
	}
	if s.monitorPath, err = findMonitor(cfg.Runtime.MonitorPath); err != nil {
		return nil, err
	}
	pinRoot, err := network.NewPinRoot(filepath.Join(cfg.RunDir, "pods"))
	if err != nil {
		return nil, err
	}
	s.pins = hostPins{root: pinRoot}
	settleRuntimes := s.startRuntimes()
	cni := network.NewCNI(cfg.CNI.ConfDir, cfg.CNI.BinDirs, filepath.Join(cfg.Root, "cni"), opts.Log.WithField("component", "cni"))
	// Before the recovery tears down a half-made pod's attachment: a killed
	// daemon's ADD may still be running (network/plugin_lock.go).
	if err := cni.AwaitOrphanPlugins(orphanPluginWait); err != nil {
		return nil, err
	}
	s.useCNI(cni)
	pinned, err := pinnedImages(cfg.Image)
	if err != nil {
		return nil, err
	}
	s.pinned.Store(&pinned)
	images, err := openImages(cfg, opts.Log)
	if err != nil {
		return nil, err
	}
	s.useImages(images)
	s.rootfsStage, s.sysStage = rootfsStageDir(cfg.RunDir), sysStageDir(cfg.RunDir)
	for _, dir := range []string{s.rootfsStage, s.sysStage} {
		if err := makeStage(dir); err != nil {
			return nil, err
		}
	}
	if dir := unsearchableAbove(s.rootfsStage); dir != "" {
		s.log.WithField("dir", dir).Warnf("pods in a user namespace cannot start: their runtime reaches their rootfs on %s, below a directory others may not search (docs/security.md)", s.rootfsStage)
	}
	s.loadAppArmorProfile(opts.Log)
	phases.Done("open")
	if err := s.openTables(); err != nil {
		return nil, err
	}
	s.usePods()
	s.countObjects()
	if err := s.newNRI(); err != nil {
		return nil, err
	}
	phases.Done("records")
	s.recover(ctx)
	settleRuntimes()
	phases.Done("runtimes")
	if err := s.restoreRuntimeConfig(); err != nil {
		s.log.WithError(err).Warn("restore the pod CIDR of UpdateRuntimeConfig; the kubelet sends it again")
	}
	if err := s.startStreaming(opts.Log); err != nil {
		return nil, err
	}
	phases.Done("streaming")
	if err := s.startNRI(); err != nil {
		s.Close() // the plugins launched before the socket failed, too
		return nil, err
	}
	phases.Done("nri")
	phases.Observe()
	s.runAfterStart(images, pinRoot)
	return s, nil
}

// cgroupDriver decides the cgroup driver once, at start, from the
// configured cgroup_driver and the node (config.ThisNode when node is nil),
// and logs the driver in force and why.
func cgroupDriver(configured string, node *config.Node, log *logrus.Entry) (config.CgroupDriverChoice, error) {
	n := config.ThisNode()
	if node != nil {
		n = *node
	}
	d, err := config.ResolveCgroupDriver(configured, n)
	if err != nil {
		return d, err
	}
	entry := log.WithFields(logrus.Fields{"driver": d.Driver, "source": d.Source, "reason": d.Reason})
	if d.Driver == config.CgroupfsDriver && n.SystemdBooted {
		entry.Warn("cgroup driver: cgroupfs beside systemd, two managers of one cgroup tree; leave cgroup_driver unset for systemd")
		return d, nil
	}
	entry.Info("cgroup driver")
	return d, nil
}

// afterStartDelay is how long after the start runAfterStart's work begins:
// past a restart's first calls (a kubelet's reconnect, its Version, Status
// and lists), which answer in milliseconds.
const afterStartDelay = time.Second

// runAfterStart runs, afterStartDelay from now, what a restart need not
// wait for nor share its CPU with (the recovery's decoding and the runc
// probes can take every core of a small node):
//   - the image store's collection, what a crashed pull, import or
//     removal left: with a node's pods it reads every rootfs record and
//     lists the content. It takes the store's locks as another
//     process's collection (minicri image import) does while the daemon
//     serves; a pull or create meanwhile waits at the content lock.
//   - every kernel probe once, for the log. Each copies the mount table,
//     which grows with the pods, CPU the first calls after a restart need
//     more. A create or a Status that needs a probe before then runs it
//     itself.
//   - the pin root's look at the mount table, for the same reason; a
//     RunPodSandbox before then settles it itself.
//   - the CNI config's load, so that the log says soon why pods would get
//     no network (its plugins' CNI versions, say): it runs every plugin of
//     the network, each a process start. A Status before then loads it
//     itself.
func (s *Server) runAfterStart(st *image.Store, pins *network.PinRoot) {
	done := make(chan struct{})
	s.afterStartDone = done
	s.afterStart = time.AfterFunc(afterStartDelay, func() {
		defer close(done)
		if s.cniConf != nil {
			_ = s.cniConf.Ready() // logs what it finds
		}
		if err := pins.Settle(); err != nil {
			s.log.WithError(err).Warn("pods' namespace pins: each pod looks at the mount table for itself")
		}
		if err := st.CollectGarbage(); err != nil {
			s.log.WithError(err).Warn("image store: garbage collection after the start failed; the next removal or refused pull runs it again")
		}
		s.log.WithField("features", kernelfeat.Report()).Info("kernel features")
	})
}

// loadAppArmorProfile loads the default AppArmor profile on a host that
// has AppArmor. A failure does not stop the daemon: the containers that
// would get the profile fail, saying it is not loaded, and the others run.
func (s *Server) loadAppArmorProfile(log *logrus.Entry) {
	loaded, err := oci.EnsureDefaultAppArmorProfile(context.Background(), filepath.Join(s.cfg.RunDir, "apparmor"))
	switch {
	case err != nil:
		log.WithError(err).Error("default AppArmor profile not loaded: containers that need it will fail")
	case loaded:
		log.WithField("profile", oci.DefaultAppArmorProfile).Info("loaded the default AppArmor profile")
	}
}

// openImages opens the image store without its garbage collection, which
// runAfterStart runs after the start.
func openImages(cfg config.Config, log *logrus.Entry) (*image.Store, error) {
	live := imageReloadable(cfg)
	st, err := image.Open(image.Options{
		Root:                   filepath.Join(cfg.Root, "image"),
		PrivateParents:         []string{cfg.Root},
		Registries:             live.Registries,
		RegistryConfigPath:     live.RegistryConfigPath,
		AuthFile:               live.AuthFile,
		SignaturePolicy:        live.SignaturePolicy,
		SignaturePolicyDir:     live.SignaturePolicyDir,
		PullTimeout:            live.PullTimeout,
		PullProgress:           live.PullProgress,
		MaxConcurrentDownloads: cfg.Image.MaxConcurrentDownloads,
		Limits:                 imageLimits(cfg),
		Log:                    log.WithField("component", "image"),
	})
	if err != nil {
		return nil, fmt.Errorf("open image store: %w", err)
	}
	return st, nil
}

// imageLimits are the unpack bounds of the [image] keys.
func imageLimits(cfg config.Config) image.Limits {
	return image.Limits{
		MaxUnpackedBytes:   cfg.Image.MaxUnpackedBytes,
		MaxUnpackedEntries: cfg.Image.MaxUnpackedEntries,
		MaxPathDepth:       cfg.Image.MaxPathDepth,
	}
}

func runtimeHandlers(cfg config.Config, execShim string) *oci.Handlers {
	h := &oci.Handlers{Default: cfg.Runtime.DefaultHandler, Runtimes: map[string]*oci.Runtime{}}
	features := filepath.Join(cfg.RunDir, runtimeFeaturesDir)
	for name, rc := range cfg.Runtime.Handlers {
		h.Runtimes[name] = &oci.Runtime{Name: name, Path: rc.Path, Root: rc.Root, SystemdCgroup: cfg.CgroupDriver == config.SystemdDriver, ExecShim: execShim, FeaturesCache: features}
	}
	return h
}

// findMonitor resolves the monitor binary: a path as given, a bare name next
// to the daemon's own binary first (where make install and make build put
// it), then in PATH.
func findMonitor(name string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	if self, err := os.Executable(); err == nil {
		beside := filepath.Join(filepath.Dir(self), name)
		if _, err := os.Stat(beside); err == nil {
			return beside, nil
		}
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("monitor binary %q: not next to minicri nor in PATH (runtime.monitor_path)", name)
	}
	return path, nil
}

// runtimeFeaturesDir, under the run dir, keeps the runtimes' `features`
// answers from one start to the next (oci/features_cache.go).
const runtimeFeaturesDir = "runtime-features"

// The directories of the record tables under the state root.
const (
	sandboxesDir  = "sandboxes"
	containersDir = "containers"
)

// openTables opens the sandboxes' and containers' records, each into the
// object kept of it.
func (s *Server) openTables() error {
	var err error
	if s.sandboxes, err = openTable[lifecycle.SandboxRecord](s, sandboxesDir, newSandbox); err != nil {
		return err
	}
	s.containers, err = openTable[lifecycle.ContainerRecord](s, containersDir, newContainer)
	return err
}

// openTable opens one kind of record under the state root. A corrupt record
// is logged and left for the operator, not fatal.
func openTable[T any, O store.Object[T]](s *Server, name string, newObject func(id string) O) (*store.Table[T, O], error) {
	t, corrupt, err := store.Open[T](filepath.Join(s.cfg.Root, name), newObject)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	for _, c := range corrupt {
		s.log.WithField("path", c.Path).WithError(c.Err).Error("corrupt record ignored; move it away once inspected")
	}
	return t, nil
}

// Register attaches both CRI services to a gRPC server.
func (s *Server) Register(g *grpc.Server) {
	runtime.RegisterRuntimeServiceServer(g, s)
	runtime.RegisterImageServiceServer(g, s)
}

// startStreaming starts the streaming server: URLs from Exec, Attach and
// PortForward point at it.
func (s *Server) startStreaming(log *logrus.Entry) error {
	sc := s.cfg.Streaming
	streams, err := streaming.New(streaming.Config{
		Address:  sc.Address,
		Port:     sc.Port,
		TLSCert:  sc.TLSCert,
		TLSKey:   sc.TLSKey,
		TokenTTL: sc.TokenTTL.Std(),

		RequestTimeout:  sc.RequestTimeout.Std(),
		IdleConnTimeout: sc.IdleConnTimeout.Std(),
		MaxConns:        sc.MaxConnections,
		MaxWaitingConns: sc.MaxWaitingConnections,
		// Ports the recovered pods' hostPorts take (sandbox_hostport.go).
		AvoidPorts: s.recoveredHostPorts(),
		Log:        log.WithField("component", "streaming"),
	}, streamRuntime{s})
	if err != nil {
		return err
	}
	s.streams = streams
	log.WithField("address", streams.Addr().String()).Info("streaming server listening")
	return nil
}

// Close releases what New acquired; open exec, attach and port-forward
// streams end.
func (s *Server) Close() error {
	if s.afterStart != nil && !s.afterStart.Stop() {
		<-s.afterStartDone // begun: the collection may be removing files
	}
	s.nri.Stop()
	if c, ok := s.scopes.(interface{ Close() }); ok {
		c.Close()
	}
	if c, ok := s.cni.(interface{ Close() }); ok {
		c.Close() // the plugin lock
	}
	if s.streams != nil {
		return s.streams.Close()
	}
	return nil
}
