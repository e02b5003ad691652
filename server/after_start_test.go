package server

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minicri/minicri/image"
)

// openLeftoverStore opens an image store whose tmp dir holds what a killed
// pull left, for the collection to remove.
func openLeftoverStore(t *testing.T) (*image.Store, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the image store's dirs are root's")
	}
	st, err := image.Open(image.Options{Root: t.TempDir(), Log: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	left := filepath.Join(st.Root(), "tmp", "blob-cut")
	if err := os.WriteFile(left, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	return st, left
}

func quietServer() *Server { return &Server{log: quietLog()} }

// The start leaves the image store's collection for later: a Close before
// then returns at once, and nothing runs after it.
func TestCloseBeforeTheAfterStartWork(t *testing.T) {
	st, left := openLeftoverStore(t)
	s := quietServer()
	s.runAfterStart(st, nil)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(afterStartDelay + 200*time.Millisecond)
	if _, err := os.Stat(left); err != nil {
		t.Fatalf("the collection ran after Close: %v", err)
	}
}

// The collection runs a while after the start, and removes what a killed
// pull left.
func TestAfterStartCollectsTheImageStore(t *testing.T) {
	st, left := openLeftoverStore(t)
	s := quietServer()
	s.runAfterStart(st, nil)
	if _, err := os.Stat(left); err != nil {
		t.Fatalf("the collection ran at once, during the start: %v", err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := os.Stat(left); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a killed pull's file is still in the image store a minute after the start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := s.Close(); err != nil { // waits for the probes that follow
		t.Fatal(err)
	}
}

// countedNetworkConfig is a networkConfig that counts its loads.
type countedNetworkConfig struct {
	networkConfig
	loads atomic.Int32
}

func (c *countedNetworkConfig) Ready() error { c.loads.Add(1); return nil }

// The CNI config's load runs every plugin of the network, each a process
// start: not during the start, whose recovery needs the CPU, but after it,
// so that the log still says soon why pods would get no network.
func TestAfterStartLoadsTheCNIConfig(t *testing.T) {
	st, _ := openLeftoverStore(t)
	s := quietServer()
	cni := &countedNetworkConfig{}
	s.cniConf = cni
	s.runAfterStart(st, nil)
	if n := cni.loads.Load(); n != 0 {
		t.Fatalf("the CNI config was loaded %d times at once, during the start", n)
	}
	deadline := time.Now().Add(time.Minute)
	for cni.loads.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the CNI config is not loaded a minute after the start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}
