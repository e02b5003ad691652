package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"

	"github.com/minicri/minicri/config"
	"github.com/minicri/minicri/internal/kernelfeat"
	"github.com/minicri/minicri/internal/procstat"
	"github.com/minicri/minicri/oci"
	"github.com/minicri/minicri/server"
)

// runDaemon serves the CRI until SIGTERM or SIGINT. Containers are never
// touched on the way out: they belong to their monitors, and a restarted
// daemon picks them up again.
func runDaemon(cfg config.Config, reload func() (config.Config, error)) error {
	log, err := newLogger(cfg)
	if err != nil {
		return err
	}
	kernelfeat.SetLogger(log.WithField("component", "kernelfeat"))
	notify := takeSystemdEnv()
	// The run dir holds the pods' /dev/shm tmpfs (1777 for the containers),
	// their hosts files and pinned namespaces: root's alone, or a host user
	// who reads the mount table could read and plant files in a pod's shm
	// (the class of CVE-2021-41091). The chmod also closes a run dir made
	// 0711 by an older minicri. The state root holds the containers' root
	// filesystems (setuid binaries and device nodes of images, what the
	// containers wrote) and is as private: not even the host uid a pod in
	// a user namespace is mapped onto may search it (the runtime finds such
	// a pod's rootfs on a stage of its own, server/container_userns.go).
	for _, dir := range []string{cfg.RunDir, cfg.Root} {
		if err := privateDir(dir); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Dir(cfg.Listen), 0o711); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(cfg.Listen), err)
	}
	lock, err := lockStateRoot(cfg.Root, rootLockWait, log)
	if err != nil {
		return err
	}
	defer lock.Close()

	m, stopObservability, err := startObservability(cfg, log)
	if err != nil {
		return err
	}
	defer stopObservability()
	tracingOpts, stopTracing, err := startTracing(cfg.Tracing, log)
	if err != nil {
		return err
	}
	defer stopTracing() // after the server's Close: the last calls' spans go too

	srv, err := server.New(server.Options{Config: cfg, Version: version, Log: log, Metrics: m})
	if err != nil {
		return fmt.Errorf("start server: %w", err)
	}
	defer srv.Close()

	listener, err := listenSocket(cfg.Listen, 0o660)
	if err != nil {
		return err
	}
	g := grpc.NewServer(append([]grpc.ServerOption{
		// Metrics first: they see the Internal a recovered panic becomes.
		grpc.ChainUnaryInterceptor(server.MetricsUnaryInterceptor(m), server.UnaryInterceptor(log)),
		grpc.ChainStreamInterceptor(server.MetricsStreamInterceptor(m), server.StreamInterceptor(log)),
		// The kubelet sends big ListContainers answers back and forth on busy
		// nodes; 16 MiB is what it allows itself.
		grpc.MaxRecvMsgSize(16 << 20),
		grpc.MaxSendMsgSize(16 << 20),
	}, tracingOpts...)...)
	srv.Register(g)

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	stopReports := reportOnSIGUSR1(log)
	defer stopReports()
	stopReloads := reloadOnSIGHUP(sighup, cfg, reload, srv, log)
	defer stopReloads()
	served := make(chan error, 1)
	go func() { served <- g.Serve(listener) }()
	log.WithFields(logrus.Fields{"socket": cfg.Listen, "root": cfg.Root, "version": version}).Info("minicri serving")
	notify.send("READY=1")

	select {
	case sig := <-signals:
		log.WithField("signal", sig.String()).Info("shutting down: no new calls, waiting for in-flight ones")
		notify.send("STOPPING=1")
		srv.EndEventStreams() // they never end by themselves
		gracefulStop(g, cfg.ShutdownTimeout.Std(), log)
	case err := <-served:
		if err != nil {
			return fmt.Errorf("serve %s: %w", cfg.Listen, err)
		}
	}
	_ = os.Remove(cfg.Listen)
	log.Info("minicri stopped")
	return nil
}

// reportOnSIGUSR1 logs the daemon's goroutine count on every SIGUSR1, and
// at trace level the stacks of all goroutines: what an operator (or a test)
// needs to tell a leak from a busy node, without a debug port.
func reportOnSIGUSR1(log *logrus.Entry) (stop func()) {
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-usr1:
			}
			log.WithField("goroutines", goruntime.NumGoroutine()).Info("SIGUSR1: runtime report")
			if log.Logger.IsLevelEnabled(logrus.TraceLevel) {
				buf := make([]byte, 1<<20)
				buf = buf[:goruntime.Stack(buf, true)]
				log.Tracef("SIGUSR1: goroutine stacks\n%s", buf)
			}
		}
	}()
	return func() {
		signal.Stop(usr1)
		close(done)
	}
}

// sighup receives the process's SIGHUPs once catchSIGHUP was called.
var sighup = make(chan os.Signal, 1)

// catchSIGHUP catches SIGHUP from the daemon command's first line on, and
// returns the undo. SIGHUP's default action ends the process: one sent
// while the daemon starts (waiting for the state root's lock, recovering
// a full node's pods) would kill it. Caught, it waits in sighup (one is
// enough: a reload reads the whole configuration) and is applied once the
// server is up.
func catchSIGHUP() (stop func()) {
	signal.Notify(sighup, syscall.SIGHUP)
	return func() { signal.Stop(sighup) }
}

// reloadOnSIGHUP reads the configuration again on every SIGHUP (the file,
// then the flags over it, as at start) and puts in force what may change
// while the daemon runs: log_level, [image.registries],
// registry_config_path, auth_file, the signature policy, the pull timeouts
// and pinned images. A
// file that fails to parse or validate changes nothing, and the log says
// why; other keys that changed are named in the log as needing a restart.
// Nothing running (pods, containers, pulls) is touched. A SIGHUP that came
// during the start is in hup already, and applied at once.
func reloadOnSIGHUP(hup <-chan os.Signal, cfg config.Config, reload func() (config.Config, error), srv *server.Server, log *logrus.Entry) (stop func()) {
	done := make(chan struct{})
	go func() {
		current := cfg
		for {
			select {
			case <-done:
				return
			case <-hup:
			}
			next, err := reload()
			if err == nil {
				err = applyReload(next, srv, log)
			}
			if err != nil {
				log.WithError(err).Error("SIGHUP: configuration not reloaded; the old one stays in force")
				continue
			}
			if keys := restartOnly(current, next); len(keys) > 0 {
				log.WithField("keys", strings.Join(keys, ", ")).Warn("SIGHUP: these keys changed but take effect only at a restart")
			}
			current = next
			log.WithField("log_level", next.LogLevel).Info("SIGHUP: configuration reloaded")
		}
	}()
	return func() { close(done) }
}

// applyReload puts next's reloadable keys in force, all or none.
func applyReload(next config.Config, srv *server.Server, log *logrus.Entry) error {
	level, err := logrus.ParseLevel(next.LogLevel)
	if err != nil {
		return fmt.Errorf("log_level: %w", err)
	}
	if err := srv.Reload(next); err != nil {
		return err
	}
	log.Logger.SetLevel(level)
	return nil
}

// restartOnly names the keys outside what a reload changes whose values
// differ between a and b.
func restartOnly(a, b config.Config) []string {
	for _, c := range []*config.Config{&a, &b} {
		c.LogLevel = ""
		c.Image.Registries, c.Image.PinnedImages = nil, nil
		c.Image.RegistryConfigPath, c.Image.AuthFile = "", ""
		c.Image.SignaturePolicy, c.Image.SignaturePolicyDir = "", ""
		c.Image.PullTimeout, c.Image.PullProgressTimeout, c.Image.PullProgressMinRate = 0, 0, 0
	}
	return config.Diff(a, b)
}

// gracefulStop lets in-flight calls finish, but not for longer than timeout.
func gracefulStop(g *grpc.Server, timeout time.Duration, log *logrus.Entry) {
	done := make(chan struct{})
	go func() {
		g.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(timeout):
		log.WithField("timeout", timeout.String()).Warn("in-flight calls still running at the shutdown timeout; closing them")
		g.Stop()
	}
}

func newLogger(cfg config.Config) (*logrus.Entry, error) {
	logger := logrus.New()
	logger.SetOutput(os.Stderr)
	level, err := logrus.ParseLevel(cfg.LogLevel)
	if err != nil {
		return nil, fmt.Errorf("log_level: %w", err)
	}
	logger.SetLevel(level)
	if cfg.LogFormat == "json" {
		logger.SetFormatter(&logrus.JSONFormatter{TimestampFormat: time.RFC3339Nano})
	} else {
		logger.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, TimestampFormat: time.RFC3339Nano})
	}
	return logrus.NewEntry(logger), nil
}

// privateDir makes dir, and makes it 0700 if it was there already.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("make %s private: %w", dir, err)
	}
	return nil
}

// listenSocket listens on a unix socket of mode perm (the CRI socket, the
// profiles'), replacing a stale socket file left by a daemon that died, but
// never one that a live server still answers on.
func listenSocket(path string, perm os.FileMode) (net.Listener, error) {
	if _, err := os.Lstat(path); err == nil {
		if served(path, servedWait) {
			return nil, fmt.Errorf("socket %s is in use by another server (held by %s)", path, procstat.SocketHolders(path))
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale socket: %w", err)
		}
	}
	// Create the socket with its mode from the start: a chmod after listen
	// would leave a moment where it is wider than that.
	old := unix.Umask(int(^perm & 0o777))
	l, err := net.Listen("unix", path)
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	return l, nil
}

// servedWait bounds how long a server has to answer on a socket before
// the socket is taken for a stale one.
const servedWait = 2 * time.Second

// served tells whether a server accepts connections on the unix socket at
// path. A connect alone does not tell: it is queued on any listening
// socket, also on the copy of a dead daemon's listener that a child forked
// just before the SIGKILL holds until its exec, or that the kernel is still
// releasing, which nobody will ever accept on. So it asks, in a form both
// of minicri's servers answer: gRPC sends its SETTINGS frame on accept, an
// HTTP server answers the request line (or closes on it). Bytes or an
// orderly close mean a server; a reset (the listener closed with the
// connection queued) or silence until wait means none.
func served(path string, wait time.Duration) bool {
	conn, err := net.DialTimeout("unix", path, wait)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(wait))
	_, _ = conn.Write([]byte("HEAD / HTTP/1.0\r\n\r\n"))
	n, err := conn.Read(make([]byte, 1))
	return n > 0 || errors.Is(err, io.EOF)
}

// systemdNotify is the address systemd gave the daemon for its state
// (Type=notify), or "".
type systemdNotify string

// takeSystemdEnv keeps NOTIFY_SOCKET for the daemon and takes it, and the
// other variables systemd hands a service, out of the environment, as
// sd_notify's unset_environment does: every child (runc, CNI and NRI
// plugins, the monitors) would inherit them, and runc acts on
// NOTIFY_SOCKET (oci.SystemdHandedEnv).
func takeSystemdEnv() systemdNotify {
	addr := os.Getenv("NOTIFY_SOCKET")
	for _, k := range oci.SystemdHandedEnv {
		os.Unsetenv(k)
	}
	return systemdNotify(addr)
}

// send tells systemd about the daemon's state; without NOTIFY_SOCKET it
// does nothing. READY=1 goes once the CRI socket listens: from then on a
// client's connect is taken, and answered once Serve runs.
func (n systemdNotify) send(state string) {
	addr := string(n)
	if addr == "" {
		return
	}
	if strings.HasPrefix(addr, "@") {
		addr = "\x00" + addr[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return
	}
	defer conn.Close()
	_, _ = conn.Write([]byte(state))
}
