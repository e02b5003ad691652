package streaming

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/streaming/pkg/httpstream/wsstream"

	"github.com/minicri/minicri/internal/connlimit"
	"github.com/minicri/minicri/internal/defaults"
)

// Defaults of Config.
const (
	DefaultTokenTTL    = time.Minute
	DefaultIdleTimeout = 4 * time.Hour
	// The kubelet sends its request as soon as it connects, and upgrades it.
	DefaultRequestTimeout  = 5 * time.Second
	DefaultIdleConnTimeout = 30 * time.Second
	// DefaultMaxConns is far above the exec, attach and port-forward
	// sessions a node has open at once.
	DefaultMaxConns = 1024
	// DefaultMaxWaitingConns is far above the connections a kubelet opens
	// at once and has not sent its request on yet; it bounds what a
	// stranger's silent connections cost (each a goroutine and 8 KiB of
	// buffers, see docs/exec.md).
	DefaultMaxWaitingConns = 128
	// streamCreationTimeout bounds the wait for a SPDY client to open its
	// streams after the upgrade.
	streamCreationTimeout = 30 * time.Second
	// closeTimeout bounds Close's wait for the streams it ended.
	closeTimeout = 5 * time.Second
)

// Config places the server.
type Config struct {
	// Address is the IP to bind; "" is 127.0.0.1. The kubelet connects from
	// the same node, so loopback is all it needs.
	Address string
	// Port to bind; 0 picks a free one.
	Port int
	// AvoidPorts are ports a free one must not be: a pod's hostPort is a
	// DNAT rule, not a bound socket, and would take the server's
	// connections. They do not apply to a configured Port.
	AvoidPorts []int
	// TLSCert and TLSKey, both set, make the server HTTPS.
	TLSCert, TLSKey string
	// TokenTTL is how long a URL stays valid before its first use; 0 is
	// DefaultTokenTTL.
	TokenTTL time.Duration
	// IdleTimeout closes a stream connection with no traffic; 0 is
	// DefaultIdleTimeout.
	IdleTimeout time.Duration
	// RequestTimeout bounds the reading of a request (TLS handshake,
	// headers, body) and the writing of its answer, until the connection
	// is upgraded to a stream; 0 is DefaultRequestTimeout.
	RequestTimeout time.Duration
	// IdleConnTimeout closes a connection that is not a stream and waits
	// for its next request; 0 is DefaultIdleConnTimeout.
	IdleConnTimeout time.Duration
	// MaxConns bounds the open connections, streams included; at the cap
	// a new connection takes the place of the one waiting longest for a
	// request, or is closed if none waits. 0 is DefaultMaxConns.
	MaxConns int
	// MaxWaitingConns bounds the open connections waiting for a request
	// (not streams, not being served); at the cap a new one takes the place
	// of a silent or idle one (internal/connlimit says which). 0 is
	// DefaultMaxWaitingConns.
	MaxWaitingConns int
	Log             *logrus.Entry
}

// Server is a running streaming server. It is safe for concurrent use.
type Server struct {
	cfg      Config
	rt       Runtime
	log      *logrus.Entry
	tokens   *tokenCache
	base     url.URL
	listener net.Listener
	limiter  *connlimit.Listener
	http     *http.Server

	// ctx ends every stream when the server closes.
	ctx     context.Context
	cancel  context.CancelFunc
	streams sync.WaitGroup
	mu      sync.Mutex
	conns   map[*watchedConn]struct{} // hijacked connections, closed by Close
}

// New binds the server's address and starts serving; URLs it hands out are
// valid as soon as it returns.
func New(cfg Config, rt Runtime) (*Server, error) {
	if cfg.Address == "" {
		cfg.Address = "127.0.0.1"
	}
	defaults.Positive(&cfg.TokenTTL, DefaultTokenTTL)
	defaults.Positive(&cfg.IdleTimeout, DefaultIdleTimeout)
	defaults.Positive(&cfg.RequestTimeout, DefaultRequestTimeout)
	defaults.Positive(&cfg.IdleConnTimeout, DefaultIdleConnTimeout)
	defaults.Positive(&cfg.MaxConns, DefaultMaxConns)
	defaults.Positive(&cfg.MaxWaitingConns, DefaultMaxWaitingConns)
	if cfg.Log == nil {
		cfg.Log = logrus.NewEntry(logrus.StandardLogger())
	}
	s := &Server{cfg: cfg, rt: rt, log: cfg.Log, tokens: newTokenCache(cfg.TokenTTL), conns: map[*watchedConn]struct{}{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	ln, err := s.listen()
	if err != nil {
		s.cancel()
		return nil, err
	}
	s.listener = ln
	s.http = &http.Server{
		Handler:           s.routes(),
		ReadHeaderTimeout: cfg.RequestTimeout,
		ReadTimeout:       cfg.RequestTimeout,
		WriteTimeout:      cfg.RequestTimeout,
		IdleTimeout:       cfg.IdleConnTimeout,
		ConnState:         s.limiter.ConnState,
		// A client cut off by a timeout is news only when debugging.
		ErrorLog: log.New(debugLog{s.log}, "", 0),
	}
	go func() {
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.WithError(err).Error("streaming server stopped")
		}
	}()
	return s, nil
}

// listen binds the address, wraps it in TLS when configured, and sets the
// base of the URLs.
//
// Connections that have not become streams are bounded: in time by the
// HTTP server's timeouts (a request must arrive within RequestTimeout, a
// kept-alive connection may wait IdleConnTimeout for its next one), and in
// number by the connlimit listener: MaxWaitingConns of them wait for a
// request at most, a silent or idle one giving way to a new one. An upgraded
// stream is none of these: it held a valid token, the timeouts no longer
// apply to it (Hijack clears them), and it is never pushed out.
func (s *Server) listen() (net.Listener, error) {
	addr := net.JoinHostPort(s.cfg.Address, strconv.Itoa(s.cfg.Port))
	listen := func() (net.Listener, error) { return net.Listen("tcp", addr) }
	if s.cfg.Port == 0 {
		listen = avoidingPorts(listen, s.cfg.AvoidPorts)
	}
	ln, err := listen()
	if err != nil {
		return nil, fmt.Errorf("streaming server: listen on %s: %w", addr, err)
	}
	s.base = url.URL{Scheme: "http", Host: urlHost(ln.Addr().(*net.TCPAddr))}
	// Below TLS: the HTTP server must see the *tls.Conn to do the handshake.
	s.limiter = connlimit.New(ln, connlimit.Limits{Max: s.cfg.MaxConns, MaxWaiting: s.cfg.MaxWaitingConns}, s.log)
	ln = s.limiter
	if s.cfg.TLSCert == "" {
		return ln, nil
	}
	cert, err := tls.LoadX509KeyPair(s.cfg.TLSCert, s.cfg.TLSKey)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("streaming server: load TLS key pair: %w", err)
	}
	s.base.Scheme = "https"
	return tls.NewListener(ln, &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		// HTTP/2 cannot upgrade a connection: SPDY and WebSocket need 1.1.
		NextProtos: []string{"http/1.1"},
	}), nil
}

// avoidingPorts wraps a listen on port 0: a listener on a port to avoid is
// held while the kernel is asked again (so that it gives another), and
// closed once one fits.
func avoidingPorts(listen func() (net.Listener, error), avoid []int) func() (net.Listener, error) {
	if len(avoid) == 0 {
		return listen
	}
	return func() (net.Listener, error) {
		var held []net.Listener
		defer func() {
			for _, l := range held {
				l.Close()
			}
		}()
		for range len(avoid) + 1 {
			ln, err := listen()
			if err != nil {
				return nil, err
			}
			if a, ok := ln.Addr().(*net.TCPAddr); !ok || !slices.Contains(avoid, a.Port) {
				return ln, nil
			}
			held = append(held, ln)
		}
		return nil, fmt.Errorf("every free port the kernel gave is a pod's hostPort")
	}
}

// urlHost is the host:port of the URLs: the bound address, or loopback for a
// wildcard bind (the kubelet dials from this node).
func urlHost(a *net.TCPAddr) string {
	ip := a.IP
	switch {
	case ip.IsUnspecified() && ip.To4() != nil:
		ip = net.IPv4(127, 0, 0, 1)
	case ip.IsUnspecified():
		ip = net.IPv6loopback
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(a.Port))
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.listener.Addr() }

// ExecURL stores the request and returns the single-use URL that runs it.
func (s *Server) ExecURL(r ExecRequest) (string, error) { return s.url("exec", r) }

// AttachURL stores the request and returns the single-use URL that attaches.
func (s *Server) AttachURL(r AttachRequest) (string, error) { return s.url("attach", r) }

// PortForwardURL stores the request and returns the single-use URL that forwards.
func (s *Server) PortForwardURL(r PortForwardRequest) (string, error) {
	return s.url("portforward", r)
}

func (s *Server) url(kind string, req any) (string, error) {
	token, err := s.tokens.insert(req)
	if err != nil {
		return "", err
	}
	u := s.base
	u.Path = "/" + kind + "/" + token
	return u.String(), nil
}

// Close stops accepting, ends every open stream (the runtime's contexts are
// cancelled and the connections closed) and waits a little for them.
func (s *Server) Close() error {
	err := s.http.Close()
	s.cancel()
	s.mu.Lock()
	for c := range s.conns {
		c.Conn.Close()
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.streams.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(closeTimeout):
		s.log.Warn("streams still ending when the streaming server closed")
	}
	return err
}

// routes serves the three kinds of stream. Anyone who reaches the port is
// answered here, before any token is checked; a request that can never
// become a stream (another method or path, a body on what must be a
// bodiless upgrade, an unknown token) is answered and its connection closed
// at once, with no wait for a body it announced: such a connection must not
// stay busy, out of reach of the connection cap's eviction.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	for _, method := range []string{"GET", "POST"} {
		mux.HandleFunc(method+" /exec/{token}", s.serveExec)
		mux.HandleFunc(method+" /attach/{token}", s.serveAttach)
		mux.HandleFunc(method+" /portforward/{token}", s.servePortForward)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { connlimit.Refuse(w, http.StatusNotFound) })
	return connlimit.Bodiless(mux, "GET", "POST")
}

// consume finds the request of the URL's token; an unknown, used or expired
// token is 404 and nothing more is said.
func consume[T any](s *Server, w http.ResponseWriter, r *http.Request) (T, bool) {
	var zero T
	req, ok := s.tokens.consume(r.PathValue("token"))
	typed, isT := req.(T)
	if !ok || !isT {
		connlimit.Refuse(w, http.StatusNotFound)
		return zero, false
	}
	return typed, true
}

func (s *Server) serveExec(w http.ResponseWriter, r *http.Request) {
	req, ok := consume[ExecRequest](s, w, r)
	if !ok {
		return
	}
	opts := remotecommand.Options{Stdin: req.Stdin, Stdout: req.Stdout, Stderr: req.Stderr, TTY: req.TTY}
	run := func(ctx context.Context, st Streams) error { return s.rt.Exec(ctx, req.ContainerID, req.Cmd, st) }
	s.serveStreams(w, r, opts, run, "executing command in container", func(w http.ResponseWriter, r *http.Request, opts *remotecommand.Options) {
		remotecommand.ServeExec(w, r, adapter{s: s, ctx: r.Context()}, "", "", req.ContainerID, req.Cmd, opts,
			s.cfg.IdleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
	})
}

func (s *Server) serveAttach(w http.ResponseWriter, r *http.Request) {
	req, ok := consume[AttachRequest](s, w, r)
	if !ok {
		return
	}
	opts := remotecommand.Options{Stdin: req.Stdin, Stdout: req.Stdout, Stderr: req.Stderr, TTY: req.TTY}
	run := func(ctx context.Context, st Streams) error { return s.rt.Attach(ctx, req.ContainerID, st) }
	s.serveStreams(w, r, opts, run, "attaching to container", func(w http.ResponseWriter, r *http.Request, opts *remotecommand.Options) {
		remotecommand.ServeAttach(w, r, adapter{s: s, ctx: r.Context()}, "", "", req.ContainerID, opts,
			s.cfg.IdleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
	})
}

// serveStreams serves an exec or an attach on a tracked connection: the
// WebSocket v5 protocol through run, the others (SPDY, older WebSocket
// versions) through the protocol library's server, serve.
func (s *Server) serveStreams(w http.ResponseWriter, r *http.Request, opts remotecommand.Options, run func(context.Context, Streams) error,
	doing string, serve func(http.ResponseWriter, *http.Request, *remotecommand.Options)) {
	w, r, done := s.track(w, r)
	defer done()
	if wsstream.IsWebSocketRequestWithStreamCloseProtocol(r) {
		s.serveWebSocketV5(w, r, &opts, run, doing)
		return
	}
	serve(w, r, &opts)
}

func (s *Server) servePortForward(w http.ResponseWriter, r *http.Request) {
	req, ok := consume[PortForwardRequest](s, w, r)
	if !ok {
		return
	}
	opts, err := portforward.BuildV4Options(req.Ports)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w, r, done := s.track(w, r)
	defer done()
	portforward.ServePortForward(w, r, adapter{s: s, ctx: r.Context()}, req.SandboxID, "", opts,
		s.cfg.IdleTimeout, streamCreationTimeout, portforward.SupportedProtocols)
}

// adapter turns the stream protocol servers' callbacks into Runtime calls,
// with the connection's context: the protocol servers pass one that does
// not end when the client goes.
type adapter struct {
	s   *Server
	ctx context.Context
}

func (a adapter) ExecInContainer(_ context.Context, _, _, container string, cmd []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan TerminalSize, _ time.Duration) error {
	return a.s.rt.Exec(a.ctx, container, cmd, Streams{Stdin: in, Stdout: out, Stderr: errOut, TTY: tty, Resize: resize})
}

func (a adapter) AttachContainer(_ context.Context, _, _, container string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan TerminalSize) error {
	return a.s.rt.Attach(a.ctx, container, Streams{Stdin: in, Stdout: out, Stderr: errOut, TTY: tty, Resize: resize})
}

func (a adapter) PortForward(_ context.Context, sandboxID, _ string, port int32, stream io.ReadWriteCloser) error {
	return a.s.rt.PortForward(a.ctx, sandboxID, port, stream)
}

// debugLog writes each message of the HTTP server's log as one debug entry
// of ours. log.Logger hands over one whole message a Write. logrus's own
// WriterLevel would do the same through a pipe, a goroutine and a 64 KB
// scanner buffer kept for the daemon's whole life.
type debugLog struct{ log *logrus.Entry }

func (l debugLog) Write(p []byte) (int, error) {
	l.log.Debug(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
