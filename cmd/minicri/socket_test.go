package main

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
)

// A listening socket that only a child holds (a copy a daemon's child
// forked before a SIGKILL keeps until its exec) accepts connects but no one
// serves it: the next daemon takes it for stale and listens, where a
// connect alone said "in use by another server".
func TestListenSocketReplacesAListenerNobodyServes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "debug.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	lf, err := l.(*net.UnixListener).File()
	if err != nil {
		t.Fatal(err)
	}
	holder := exec.Command("sleep", "60")
	holder.ExtraFiles = []*os.File{lf}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	lf.Close()
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()

	next, err := listenSocket(path, 0o600)
	if err != nil {
		t.Fatalf("listenSocket on a listener only a child holds: %v", err)
	}
	next.Close()
}

// A live server of either kind minicri runs is never replaced.
func TestListenSocketRefusesALiveServer(t *testing.T) {
	for name, serve := range map[string]func(net.Listener){
		"grpc": func(l net.Listener) { _ = grpc.NewServer().Serve(l) },
		"http": func(l net.Listener) { _ = http.Serve(l, http.NotFoundHandler()) },
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "s.sock")
			l, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			go serve(l)
			if next, err := listenSocket(path, 0o600); err == nil || !strings.Contains(err.Error(), "in use by another server") {
				if next != nil {
					next.Close()
				}
				t.Fatalf("listenSocket on a live %s server: %v, want in use", name, err)
			}
		})
	}
}
