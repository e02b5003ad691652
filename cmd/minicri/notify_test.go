package main

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/minicri/minicri/oci"
)

// Under Type=notify the daemon keeps systemd's socket for itself (READY=1
// reaches it) and no child inherits it or the other variables systemd
// handed the service.
func TestSystemdEnvIsTheDaemonsAlone(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, k := range oci.SystemdHandedEnv {
		t.Setenv(k, "1")
	}
	t.Setenv("NOTIFY_SOCKET", sock)
	notify := takeSystemdEnv()
	for _, k := range oci.SystemdHandedEnv {
		if v, ok := os.LookupEnv(k); ok {
			t.Errorf("%s=%s left in the daemon's environment, for its children", k, v)
		}
	}
	notify.send("READY=1")
	_ = l.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 64)
	n, err := l.Read(buf)
	if err != nil || string(buf[:n]) != "READY=1" {
		t.Fatalf("systemd got %q (%v), want READY=1", buf[:n], err)
	}
}
