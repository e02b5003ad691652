// Package config holds minicri's configuration: its schema with the defaults a
// user gets with no file, loading from a TOML file, command-line flags that
// override the file, and validation that names the offending key.
package config

import (
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

//go:generate go run ./internal/fielddocs/generate config.go field_docs.go

// Config is the whole configuration. Every field carries its TOML key in its
// tag and a doc comment written for a node operator: `minicri config` prints
// it above the key and --help under the key's flag. They read it from
// field_docs.go, which `go generate ./config` makes from these comments
// (TestFieldDocsAreCurrent fails while the two differ). A note for
// developers goes on the type, not the field.
type Config struct {
	// Unix socket the CRI gRPC server listens on (mode 0660).
	Listen string `toml:"listen"`
	// State root: records of pods and containers, images, layers. Kept across
	// reboots.
	Root string `toml:"root"`
	// Run dir: pinned namespaces, monitor sockets, runtime state. Lost at
	// reboot, as it should be.
	RunDir string `toml:"run_dir"`
	// Daemon log level: trace, debug, info, warn, error. debug logs one line per
	// RPC with its duration.
	LogLevel string `toml:"log_level"`
	// Daemon log format: text or json.
	LogFormat string `toml:"log_format"`
	// Cgroup driver: cgroupfs or systemd. Unset: detected at every start,
	// systemd where systemd is PID 1 (/run/systemd/system exists), cgroupfs
	// elsewhere. The kubelet takes the driver from minicri (RuntimeConfig).
	// systemd on a node without systemd is refused at start.
	CgroupDriver string `toml:"cgroup_driver"`
	// On SIGTERM/SIGINT, how long in-flight calls may run before the daemon
	// exits anyway. Containers are never touched.
	ShutdownTimeout Duration `toml:"shutdown_timeout"`
	// Where Go's net/http/pprof profiles are served (/debug/pprof/): the
	// absolute path of a unix socket, made mode 0600 so that only root reaches
	// it, or host:port on loopback (127.0.0.1:6060), which any local user
	// reaches. The default is debug.sock in the run dir (as containerd's debug
	// socket), also when run_dir is moved. Empty: off. Profiles show memory
	// contents and the daemon's command line, so no other address is accepted.
	ProfileAddress string `toml:"profile_address"`

	// OCI runtimes. Runtime handlers (Kubernetes RuntimeClass) are listed under
	// [runtime.handlers.NAME].
	Runtime RuntimeConfig `toml:"runtime"`
	// The streaming server that serves exec, attach and port-forward to the
	// kubelet.
	Streaming StreamingConfig `toml:"streaming"`
	// Pod networking with CNI plugins.
	CNI CNIConfig `toml:"cni"`
	// Image pulls and registries.
	Image ImageConfig `toml:"image"`
	// Container Device Interface (CDI): the devices that device plugins and DRA
	// drivers describe in spec files and that containers ask for by name
	// (CDI_devices, cdi.k8s.io/* annotations).
	CDI CDIConfig `toml:"cdi"`
	// Prometheus metrics of the daemon (see docs/observability.md).
	Metrics MetricsConfig `toml:"metrics"`
	// OpenTelemetry traces of the CRI calls and of what they run (runtime, CNI,
	// pulls), exported over OTLP/gRPC (see docs/observability.md). Read at
	// start only: a change takes a restart.
	Tracing TracingConfig `toml:"tracing"`
	// Node Resource Interface (NRI) plugins, as containerd and cri-o run them:
	// they see every pod and container and may adjust a container's OCI spec
	// (see docs/nri.md).
	NRI NRIConfig `toml:"nri"`
}

// Validate checks values that the types alone cannot; each error names its
// key. Each section checks its own keys, beside its declaration; the first
// bad key is reported.
func (c *Config) Validate() error {
	for _, err := range slices.Concat(c.check(), c.Runtime.check(), c.Streaming.check(),
		c.CNI.check(), c.Image.check(), c.CDI.check(), c.Metrics.check(), c.Tracing.check(), c.NRI.check()) {
		if err != nil {
			return err
		}
	}
	return nil
}

// check checks the top-level keys.
func (c *Config) check() []error {
	return []error{
		absolute("listen", c.Listen),
		refuse(len(c.Listen) > 107, "listen", "a unix socket path must be shorter than 108 bytes"),
		absolute("root", c.Root),
		absolute("run_dir", c.RunDir),
		oneOf("log_level", c.LogLevel, "trace", "debug", "info", "warn", "error"),
		oneOf("log_format", c.LogFormat, "text", "json"),
		refuse(c.CgroupDriver != "" && c.CgroupDriver != CgroupfsDriver && c.CgroupDriver != SystemdDriver,
			"cgroup_driver", fmt.Sprintf("%q is not one of cgroupfs, systemd (or unset: detected)", c.CgroupDriver)),
		refuse(c.ShutdownTimeout < 0, "shutdown_timeout", "must not be negative"),
		profileAddress(c.ProfileAddress),
	}
}

// profileAddress accepts a unix socket path or a loopback host:port.
func profileAddress(addr string) error {
	if !strings.HasPrefix(addr, "/") {
		return listenAddress("profile_address", addr, false)
	}
	return refuse(len(addr) > 107, "profile_address", "a unix socket path must be shorter than 108 bytes")
}

// MetricsConfig places the Prometheus metrics endpoint.
type MetricsConfig struct {
	// host:port where the metrics are served over plain HTTP at /metrics, e.g.
	// 127.0.0.1:9388. Empty: off, and nothing is counted. A loopback address
	// unless allow_non_loopback is set.
	Address string `toml:"address"`
	// Accept a metrics address that is not loopback (say the node's IP, for a
	// Prometheus elsewhere). The endpoint has no authentication and no TLS: put
	// a firewall or a proxy in front.
	AllowNonLoopback bool `toml:"allow_non_loopback"`
}

func (m MetricsConfig) check() []error {
	return []error{listenAddress("metrics.address", m.Address, m.AllowNonLoopback)}
}

// TracingConfig is the [tracing] section. containerd calls these keys
// endpoint and sampling_ratio too (its otlp and tracing plugins); cri-o
// enable_tracing, tracing_endpoint and tracing_sampling_rate_per_million.
type TracingConfig struct {
	// host:port of an OpenTelemetry collector's OTLP/gRPC receiver, e.g.
	// 127.0.0.1:4317, reached over plain gRPC (no TLS), as the kubelet's own
	// tracing. Empty: off, and no span is made.
	Endpoint string `toml:"endpoint"`
	// Share of the calls that come with no trace context (crictl, a kubelet
	// without tracing) that are traced, 0 to 1. A call whose caller sent a
	// trace context follows the caller's decision whatever this says: what the
	// kubelet sampled is traced, what it did not is not.
	SamplingRatio float64 `toml:"sampling_ratio"`
}

func (t TracingConfig) check() []error {
	var endpoint error
	if t.Endpoint != "" {
		endpoint = listenAddress("tracing.endpoint", t.Endpoint, true)
	}
	return []error{
		endpoint,
		// !(a && b) and not (a || b): NaN fails both comparisons.
		refuse(!(t.SamplingRatio >= 0 && t.SamplingRatio <= 1), "tracing.sampling_ratio", "must be from 0 to 1"),
	}
}

// RuntimeConfig chooses the OCI runtime per runtime handler.
type RuntimeConfig struct {
	// One table per handler: [runtime.handlers.NAME] with path and root.
	Handlers map[string]RuntimeHandler `toml:"handlers"`
	// Handler used when a pod names none (RuntimeClass unset). Empty: the most
	// capable runc, chosen once at start among the handlers whose binary is
	// named runc, each asked `runc features`: one whose version has the fixes
	// of CVE-2025-31133, CVE-2025-52565 and CVE-2025-52881 (runc 1.2.8, 1.3.3,
	// 1.4.0-rc.3 or later) wins, then one that can idmap mounts (pods with
	// hostUsers: false), then one with recursive read-only mounts; a tie goes
	// to the handler named runc, and a missing binary never wins. A runc
	// without the fixes is named in the log and in crictl info.
	// With the default handlers: runc-current where make deps built it, else
	// runc. The log and crictl info say which was chosen.
	DefaultHandler string `toml:"default_handler"`
	// Path of the minicri-conmon monitor binary; a bare name is looked up next
	// to the daemon binary, then in PATH.
	MonitorPath string `toml:"monitor_path"`
	// Bytes of stdout and of stderr that ExecSync (exec probes) keeps; the rest
	// is dropped and the truncation logged. Whatever this says, the two together
	// are cut to 16776192 bytes (16 MiB less 1 KiB), each keeping at least half,
	// so that the answer fits the 16 MiB message the kubelet's CRI client
	// accepts.
	ExecSyncMaxOutput int `toml:"exec_sync_max_output"`
	// Containers one minicri-conmon process serves at most. A pod's containers
	// share one where they fit, and pods fill a monitor before another starts:
	// each saves a Go runtime's memory. 1 gives every container its own
	// monitor; a monitor that dies ends the logs and the containers it served.
	MonitorShare int `toml:"monitor_share"`
	// Bytes a checkpoint (CheckpointContainer) may write: its archive, and
	// the rootfs-diff.tar it stages under the state root, each stop at this,
	// and the call fails with ResourceExhausted leaving neither behind. The
	// archive holds the container's memory (CRIU's images) and what it wrote
	// in its root filesystem (a sparse file counted by what it holds on disk).
	CheckpointMaxBytes int64 `toml:"checkpoint_max_bytes"`
}

func (r RuntimeConfig) check() []error {
	checks := []error{
		refuse(r.MonitorShare < 1, "runtime.monitor_share", "must be at least 1 container"),
		refuse(r.ExecSyncMaxOutput < 1, "runtime.exec_sync_max_output", "must be at least 1 byte"),
		refuse(r.CheckpointMaxBytes < 1<<20, "runtime.checkpoint_max_bytes", "must be at least 1 MiB"),
	}
	if len(r.Handlers) == 0 {
		checks = append(checks, &InvalidError{"runtime.handlers", "at least one [runtime.handlers.NAME] table is needed"})
	}
	if _, ok := r.Handlers[r.DefaultHandler]; r.DefaultHandler != "" && !ok {
		checks = append(checks, &InvalidError{"runtime.default_handler", fmt.Sprintf("%q has no [runtime.handlers.%s] table", r.DefaultHandler, r.DefaultHandler)})
	}
	for name, h := range r.Handlers {
		checks = append(checks, h.check("runtime.handlers."+name))
	}
	return checks
}

// CurrentRuncHandler names the handler of the runc release that make deps
// builds (hack/build-runc.sh): Debian 12's runc 1.1.5 (handler runc) has no
// idmapped mounts, so this handler, the default where it is installed, runs
// pods in a user namespace (docs/security.md).
const CurrentRuncHandler = "runc-current"

// DistroRuncHandler names the runc found in PATH: Debian's /usr/sbin/runc
// on Debian. A RuntimeClass may ask for it by this name whichever handler
// is the default.
const DistroRuncHandler = "runc"

// CurrentRuncPath is where hack/build-runc.sh installs that runc, beside
// Debian's /usr/sbin/runc and never over it. Keep the two in step.
const CurrentRuncPath = "/usr/local/lib/minicri/runc-v1.5.2/runc"

// RuntimeHandler is one OCI runtime binary and its state directory.
type RuntimeHandler struct {
	// OCI runtime binary; a bare name is looked up in PATH.
	Path string `toml:"path"`
	// The runtime's own state directory (its --root); empty means
	// RUN_DIR/runtime/NAME.
	Root string `toml:"root"`
}

// check checks the handler whose table is key.
func (h RuntimeHandler) check(key string) error {
	if h.Path == "" {
		return &InvalidError{key + ".path", "must not be empty"}
	}
	return absolute(key+".root", h.Root)
}

// StreamingConfig places the exec/attach/port-forward server.
type StreamingConfig struct {
	// Address the streaming server binds. The kubelet proxies to it, so loopback
	// is the safe default.
	Address string `toml:"address"`
	// Port of the streaming server; 0 picks a free port at start.
	Port int `toml:"port"`
	// PEM certificate for the streaming server; empty serves plain HTTP (fine on
	// loopback).
	TLSCert string `toml:"tls_cert"`
	// PEM private key matching tls_cert.
	TLSKey string `toml:"tls_key"`
	// How long an exec/attach/port-forward URL handed to the kubelet stays valid
	// before its single use.
	TokenTTL Duration `toml:"token_ttl"`

	// A connection must send its whole request (TLS handshake, headers) and take
	// the answer within this, until it is upgraded to a stream; an upgraded
	// exec, attach or port-forward stream is never cut by it. The kubelet sends
	// its request as soon as it connects.
	RequestTimeout Duration `toml:"request_timeout"`
	// A connection that is not a stream and waits for its next request is
	// closed after this. (A refused request closes its connection at once.)
	IdleConnTimeout Duration `toml:"idle_conn_timeout"`
	// Connections open at once, streams included. At the cap a new connection
	// takes the place of one waiting for a request (as for
	// max_waiting_connections), or is closed when every one is a stream or
	// being served.
	MaxConnections int `toml:"max_connections"`
	// Connections open at once that wait for a request: accepted and their
	// request not read yet, or idle after an answer. Anyone who reaches the port
	// can open them; at this cap a new connection waits in the kernel's backlog
	// until one of them may go: one idle after an answer, or one that waited
	// 100ms with nothing unread (silent, or half a request and stopped), the
	// longest waiting first. Never a stream. At most max_connections.
	MaxWaitingConnections int `toml:"max_waiting_connections"`
}

func (s StreamingConfig) check() []error {
	return []error{
		refuse(s.Port < 0 || s.Port > 65535, "streaming.port", fmt.Sprintf("%d is not a port (0-65535)", s.Port)),
		refuse(s.TokenTTL <= 0, "streaming.token_ttl", "must be positive"),
		refuse(s.RequestTimeout <= 0, "streaming.request_timeout", "must be positive"),
		refuse(s.IdleConnTimeout <= 0, "streaming.idle_conn_timeout", "must be positive"),
		refuse(s.MaxConnections < 1, "streaming.max_connections", "must be at least 1"),
		refuse(s.MaxWaitingConnections < 1 || s.MaxWaitingConnections > s.MaxConnections, "streaming.max_waiting_connections",
			"must be at least 1 and at most streaming.max_connections"),
		refuse((s.TLSCert == "") != (s.TLSKey == ""), "streaming.tls_cert", "tls_cert and tls_key must be set together"),
	}
}

// CNIConfig finds the network configuration and plugins. ConfTemplate has
// containerd's conf_template semantics, so that a template written for
// containerd works unchanged.
type CNIConfig struct {
	// Directory of CNI network configs; the first .conflist/.conf/.json in
	// lexical order is used.
	ConfDir string `toml:"conf_dir"`
	// Directories searched for CNI plugin binaries, in order.
	BinDirs []string `toml:"bin_dirs"`
	// Go text/template file of a CNI network config list. When set, and the
	// kubelet sends the node's pod CIDR (UpdateRuntimeConfig, with the kubelet's
	// podCIDR set), minicri writes it to CONF_DIR/10-minicri-net.conflist with
	// {{.PodCIDR}} (the first CIDR), {{.PodCIDRRanges}} (all of them) and
	// {{.Routes}} (0.0.0.0/0 and/or ::/0) filled in, as containerd's
	// conf_template does; only while conf_dir holds no other network config.
	// Empty: minicri never writes a network config.
	ConfTemplate string `toml:"conf_template"`
}

func (c CNIConfig) check() []error {
	return []error{absolute("cni.conf_dir", c.ConfDir), absoluteOrEmpty("cni.conf_template", c.ConfTemplate)}
}

// ImageConfig tunes pulls and names registry mirrors.
type ImageConfig struct {
	// A pull that takes longer than this is cancelled; 0 means no limit.
	PullTimeout Duration `toml:"pull_timeout"`
	// A download (a manifest from its request on, the image config, a layer,
	// a signature payload or referrers list) that moves fewer than
	// pull_progress_min_rate bytes a second on average over this window
	// cancels its pull, with an error that names what stalled and the bytes
	// that arrived of its size: a registry that trickles cannot hold a pull
	// (containerd's image_pull_progress_timeout, where one byte counts as
	// progress). Unpacking a layer is not download and never counts as
	// stalled. 0: off.
	PullProgressTimeout Duration `toml:"pull_progress_timeout"`
	// Bytes a second that a download must average over
	// pull_progress_timeout (1024: 300 KiB in the default 5m window).
	PullProgressMinRate int64 `toml:"pull_progress_min_rate"`
	// Layers downloaded at once by one pull.
	MaxConcurrentDownloads int `toml:"max_concurrent_downloads"`
	// Bytes that the files of one image may declare, summed over the layers a
	// pull or import unpacks (the apparent size: a sparse file counts whole,
	// though its holes and runs of zeros take no disk). An image over it is
	// refused and nothing of it kept. Default 64 GiB; raise it for images that
	// carry large models.
	MaxUnpackedBytes int64 `toml:"max_unpacked_bytes"`
	// Files, directories (implicit parents too), links and whiteouts that one
	// image may unpack, summed over its layers. An image over it is refused.
	MaxUnpackedEntries int64 `toml:"max_unpacked_entries"`
	// Directories a path in an image layer may have. A layer with a deeper path
	// is refused.
	MaxPathDepth int `toml:"max_path_depth"`
	// Per registry host: [image.registries."HOST"] with mirrors = [...] and
	// insecure = true|false. HOST in any spelling: it is read, as a
	// reference's host is, in lower case, its port without leading zeros
	// and without :443; two keys of one registry fail the pulls from it. A
	// hosts.toml of the host's own in registry_config_path replaces its
	// entry here. Reloaded on SIGHUP.
	Registries map[string]RegistryConfig `toml:"registries"`
	// Directory of per-registry host configs in containerd's hosts.toml
	// shape: DIR/HOST[:PORT]/hosts.toml (HOST in any spelling, as for
	// registries; else DIR/_default/hosts.toml) with
	// server, [host."URL"] mirrors tried in order, capabilities (pull,
	// resolve), ca, client, header, override_path and skip_verify (see
	// docs/images.md). Read at every pull: an edit needs no restart. A
	// host's own hosts.toml wins over its [image.registries] entry, which
	// wins over _default. A missing directory is no host configs.
	RegistryConfigPath string `toml:"registry_config_path"`
	// A Docker config.json ({"auths": {"HOST": {"auth": "base64 user:pass"}}}
	// or username/password) whose credentials serve a pull for which the
	// kubelet sends none, as cri-o's global_auth_file. Read at every pull.
	// Empty or missing: none.
	AuthFile string `toml:"auth_file"`
	// A containers-policy.json (cri-o's signature_policy) that every pull must
	// pass: reject, insecureAcceptAnything, or sigstoreSigned with public keys,
	// per registry, repository or tag (see docs/images.md). Judged after the
	// manifest is fetched and before any layer is, and again at every
	// CreateContainer, against the signatures the pull kept; read at every
	// pull and create. Empty: off, every image is pulled.
	SignaturePolicy string `toml:"signature_policy"`
	// Directory of per-namespace policies: DIR/NAMESPACE.json replaces
	// signature_policy for the pulls of that Kubernetes namespace's pods (the
	// pull's sandbox config names it), as cri-o's signature_policy_dir, and
	// for the creates of that namespace's containers, whoever pulled the
	// image. Read at every pull and create. Empty: none.
	SignaturePolicyDir string `toml:"signature_policy_dir"`
	// Images that the kubelet's image garbage collection never removes, as
	// containerd's pinned_images: NAME = "REFERENCE" (base =
	// "docker.io/library/busybox:1.36"); the names are the operator's. An
	// image is pinned (pinned: true in ImageStatus and ListImages) while one
	// of its tags or repo digests is one of these references, normalised
	// (busybox is docker.io/library/busybox:latest). minicri itself needs no
	// image (no pause image), so none is pinned by default. An explicit
	// RemoveImage (crictl rmi) still removes a pinned image, as containerd's.
	PinnedImages map[string]string `toml:"pinned_images"`
}

func (c ImageConfig) check() []error {
	return []error{
		refuse(c.MaxConcurrentDownloads < 1, "image.max_concurrent_downloads", "must be at least 1"),
		refuse(c.PullTimeout < 0, "image.pull_timeout", "must not be negative"),
		refuse(c.PullProgressTimeout < 0, "image.pull_progress_timeout", "must not be negative"),
		refuse(c.PullProgressMinRate < 1, "image.pull_progress_min_rate", "must be at least 1 byte a second"),
		refuse(c.MaxUnpackedBytes < 1, "image.max_unpacked_bytes", "must be at least 1 byte"),
		refuse(c.MaxUnpackedEntries < 1, "image.max_unpacked_entries", "must be at least 1"),
		refuse(c.MaxPathDepth < 1, "image.max_path_depth", "must be at least 1"),
		absoluteOrEmpty("image.registry_config_path", c.RegistryConfigPath),
		absoluteOrEmpty("image.auth_file", c.AuthFile),
		absoluteOrEmpty("image.signature_policy", c.SignaturePolicy),
		absoluteOrEmpty("image.signature_policy_dir", c.SignaturePolicyDir),
	}
}

// RegistryConfig is what a node knows about one registry host.
type RegistryConfig struct {
	// Endpoints tried in order before the registry itself.
	Mirrors []string `toml:"mirrors"`
	// Allow plain HTTP and skip TLS verification for this host. Without it,
	// only a loopback registry (localhost, 127.0.0.0/8, ::1) is reached
	// over plain HTTP; one on a private address or a .local name is not.
	Insecure bool `toml:"insecure"`
}

// CDIConfig finds the CDI spec files.
type CDIConfig struct {
	// Resolve the CDI devices a container asks for and add them to it. When
	// false, a container that asks for CDI devices is refused, never started
	// without them.
	Enabled bool `toml:"enabled"`
	// Directories of CDI spec files (.json, .yaml), in rising priority: a device
	// in a later directory wins over the same device in an earlier one. Read
	// again at each create that asks for a CDI device, so specs added later are
	// seen.
	SpecDirs []string `toml:"spec_dirs"`
}

func (c CDIConfig) check() []error {
	checks := make([]error, 0, len(c.SpecDirs))
	for _, dir := range c.SpecDirs {
		checks = append(checks, absolute("cdi.spec_dirs", dir))
	}
	return checks
}

// NRIConfig is the [nri] section: containerd's and cri-o's keys and defaults.
type NRIConfig struct {
	// Run NRI: plugins are told of every pod and container and may adjust the
	// containers' OCI specs. With no plugin installed or connected it costs
	// nothing but the socket.
	Enabled bool `toml:"enabled"`
	// Unix socket where externally launched plugins connect (mode 0700 dir).
	// Each daemon on a node needs its own.
	SocketPath string `toml:"socket_path"`
	// Directory of plugins the daemon launches itself at start, named
	// IDX-NAME (e.g. 10-logger): executables run in IDX order.
	PluginPath string `toml:"plugin_path"`
	// Directory of the configuration files of launched plugins: NAME.conf or
	// IDX-NAME.conf.
	PluginConfigPath string `toml:"plugin_config_path"`
	// How long a plugin may take to register once started or connected.
	PluginRegistrationTimeout Duration `toml:"plugin_registration_timeout"`
	// How long a plugin may take to answer one request; a plugin that takes
	// longer is dropped.
	PluginRequestTimeout Duration `toml:"plugin_request_timeout"`
	// Refuse plugins that connect to socket_path by themselves: only the
	// plugins in plugin_path run.
	DisableConnections bool `toml:"disable_connections"`
}

func (c NRIConfig) check() []error {
	if !c.Enabled {
		return nil
	}
	return []error{
		absolute("nri.socket_path", c.SocketPath),
		absolute("nri.plugin_path", c.PluginPath),
		absolute("nri.plugin_config_path", c.PluginConfigPath),
		refuse(c.PluginRegistrationTimeout <= 0, "nri.plugin_registration_timeout", "must be positive"),
		refuse(c.PluginRequestTimeout <= 0, "nri.plugin_request_timeout", "must be positive"),
	}
}

// ExecSyncOutputLimit is the most ExecSync output, stdout and stderr
// together, that fits one CRI answer: the kubelet's CRI client (and the
// daemon's gRPC server) take messages of at most 16 MiB, and the answer's own
// framing (two length-prefixed fields and an exit code, 21 bytes at most)
// must fit beside the output; 1 KiB is kept for it.
const ExecSyncOutputLimit = 16<<20 - 1<<10

// Default returns the configuration a user gets with no file and no flags.
func Default() Config {
	return Config{
		Listen:          "/run/minicri/minicri.sock",
		Root:            "/var/lib/minicri",
		RunDir:          "/run/minicri",
		ProfileAddress:  "/run/minicri/" + profileSocketName,
		LogLevel:        "info",
		LogFormat:       "text",
		CgroupDriver:    "", // detected at start: ResolveCgroupDriver
		ShutdownTimeout: Duration(10 * time.Second),
		Runtime: RuntimeConfig{
			// Chosen at start, the most capable runc (server.chooseDefaultHandler),
			// as containerd 2.x and cri-o run pods with hostUsers: false
			// on their default handler.
			DefaultHandler:    "",
			MonitorPath:       "minicri-conmon",
			ExecSyncMaxOutput: 16 << 20,
			MonitorShare:      8,
			// Room for the memory of a large container and its writes,
			// short of filling a node's disk.
			CheckpointMaxBytes: 16 << 30,
			Handlers: map[string]RuntimeHandler{
				DistroRuncHandler: {Path: "runc"},
				"crun":            {Path: "crun"},
				// A current runc beside Debian's (hack/build-runc.sh, make
				// deps): it can run pods in a user namespace.
				CurrentRuncHandler: {Path: CurrentRuncPath},
			},
		},
		Streaming: StreamingConfig{
			Address:               "127.0.0.1",
			TokenTTL:              Duration(time.Minute),
			RequestTimeout:        Duration(5 * time.Second),
			IdleConnTimeout:       Duration(30 * time.Second),
			MaxConnections:        1024,
			MaxWaitingConnections: 128,
		},
		CNI: CNIConfig{
			ConfDir: "/etc/cni/net.d",
			BinDirs: []string{"/opt/cni/bin", "/usr/lib/cni"},
		},
		Image: ImageConfig{
			PullTimeout:            Duration(10 * time.Minute),
			PullProgressTimeout:    Duration(5 * time.Minute), // containerd's default
			PullProgressMinRate:    1 << 10,
			MaxConcurrentDownloads: 3,
			MaxUnpackedBytes:       64 << 30,
			MaxUnpackedEntries:     1_000_000,
			MaxPathDepth:           256,
			Registries:             map[string]RegistryConfig{},
			RegistryConfigPath:     "/etc/minicri/certs.d",
			PinnedImages:           map[string]string{},
		},
		// containerd's defaults (enable_cdi, cdi_spec_dirs), which are the
		// CDI library's: static specs in /etc/cdi, generated ones in
		// /var/run/cdi.
		CDI: CDIConfig{
			Enabled:  true,
			SpecDirs: []string{"/etc/cdi", "/var/run/cdi"},
		},
		// containerd's ratio: once an operator names an endpoint, crictl's
		// calls are traced too; the kubelet's follow the kubelet's sampling.
		Tracing: TracingConfig{SamplingRatio: 1},
		// containerd's and cri-o's defaults (the NRI library's), but for
		// the request timeout: 5s, not 2s. It bounds a plugin's Synchronize
		// too, and a plugin dropped there misses every pod and container made
		// meanwhile (they wait for the synchronization, then are told to
		// the plugins that remain); cri-tools' NRI synchronization specs
		// hold a Synchronize open for 2s and fail on 2s.
		NRI: NRIConfig{
			Enabled:                   true,
			SocketPath:                "/var/run/nri/nri.sock",
			PluginPath:                "/opt/nri/plugins",
			PluginConfigPath:          "/etc/nri/conf.d",
			PluginRegistrationTimeout: Duration(5 * time.Second),
			PluginRequestTimeout:      Duration(5 * time.Second),
		},
	}
}

// Duration is a time.Duration written as "10s" or "5m" in TOML and flags.
type Duration time.Duration

// UnmarshalText parses a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("not a duration (e.g. 10s, 5m): %q", b)
	}
	*d = Duration(v)
	return nil
}

// MarshalText writes the duration as Go does.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// Std returns the value as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// InvalidError is a bad value for a named key.
type InvalidError struct {
	Key    string
	Reason string
}

func (e *InvalidError) Error() string { return fmt.Sprintf("config key %q: %s", e.Key, e.Reason) }

// oneOf refuses a value that is none of allowed.
func oneOf(key, v string, allowed ...string) error {
	if slices.Contains(allowed, v) {
		return nil
	}
	return &InvalidError{key, fmt.Sprintf("%q is not one of %s", v, strings.Join(allowed, ", "))}
}

// absolute refuses a path that is not absolute.
func absolute(key, p string) error {
	if !filepath.IsAbs(p) {
		return &InvalidError{key, fmt.Sprintf("%q must be an absolute path", p)}
	}
	return nil
}

// absoluteOrEmpty is absolute for a path that may be left out.
func absoluteOrEmpty(key, p string) error {
	if p == "" {
		return nil
	}
	return absolute(key, p)
}

// refuse is the check of one condition: reason when bad holds.
func refuse(bad bool, key, reason string) error {
	if bad {
		return &InvalidError{key, reason}
	}
	return nil
}

// listenAddress checks an optional host:port to serve on: empty, or a port
// (1-65535, a scraper needs to know it) and a loopback host unless
// nonLoopback allows any.
func listenAddress(key, addr string, nonLoopback bool) error {
	if addr == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return &InvalidError{key, fmt.Sprintf("%q is not host:port: %v", addr, err)}
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return &InvalidError{key, fmt.Sprintf("%q: port %q is not 1-65535", addr, port)}
	}
	if nonLoopback {
		return nil
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return &InvalidError{key, fmt.Sprintf("%q is not a loopback address (127.0.0.1:PORT, [::1]:PORT, localhost:PORT): the endpoint has no authentication", addr)}
	}
	return nil
}
