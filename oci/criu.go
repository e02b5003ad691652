package oci

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	criu "github.com/checkpoint-restore/go-criu/v8"
	"github.com/checkpoint-restore/go-criu/v8/rpc"

	"github.com/minicri/minicri/internal/osthread"
)

// ErrNoCheckpoint reports that this node cannot checkpoint a container:
// CRIU is missing, older than MinCRIUVersion, or cannot dump a process on
// this kernel. The server answers FailedPrecondition.
var ErrNoCheckpoint = errors.New("container checkpoints need a working CRIU")

// MinCRIUVersion is the oldest CRIU that checkpoints a Kubernetes
// container (3.16, as containerd asks: the pod's namespaces, bind mounts
// and cgroups of a CRI container), in go-criu's Major*10000+Minor*100+Sub.
const MinCRIUVersion = 31600

// CRIU answers whether the CRIU that the OCI runtime runs (criu in the
// daemon's PATH, which runc inherits) works on this node. The answer is
// found by doing: CRIU's version over its RPC (go-criu), then a dump of a
// throwaway process with leave-running, because a CRIU whose version
// suffices can still fail on a kernel newer than it knows (Debian 12's 3.17
// on 6.18: "Unexpected rt vDSO area bounds"). It is kept for as long as the
// criu binary is the same file, so that a CRIU installed or upgraded later
// is seen by the next call. Use a CRIU by pointer.
type CRIU struct {
	// Path is the criu binary; "" looks up "criu" in PATH, as runc does.
	Path string
	// ScratchDir is a directory of the daemon's own where the probe's
	// images go (a fresh directory below it, removed after).
	ScratchDir string

	mu     sync.Mutex
	binary binaryIdentity
	status CRIUStatus
}

// CRIUStatus is what the probe found.
type CRIUStatus struct {
	Path    string `json:"path,omitempty"`
	Version int    `json:"version,omitempty"` // Major*10000+Minor*100+Sub
	// Err says why checkpoints cannot work; it wraps ErrNoCheckpoint.
	Err error `json:"-"`
}

// VersionString is Version as CRIU prints it, "3.17.1".
func (s CRIUStatus) VersionString() string {
	if s.Version == 0 {
		return ""
	}
	v := fmt.Sprintf("%d.%d", s.Version/10000, s.Version/100%100)
	if sub := s.Version % 100; sub != 0 {
		v += fmt.Sprintf(".%d", sub)
	}
	return v
}

// binaryIdentity tells whether a path still names the file it did.
type binaryIdentity struct {
	path      string
	dev, ino  uint64
	size      int64
	mtimeNano int64
}

func identify(path string) (binaryIdentity, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return binaryIdentity{}, err
	}
	return binaryIdentity{path: path, dev: st.Dev, ino: st.Ino, size: st.Size, mtimeNano: st.Mtim.Nano()}, nil
}

// criuProbeTimeout bounds the probe's dump: CRIU that hangs must not hang
// the checkpoint call or Status.
const criuProbeTimeout = 60 * time.Second

// Check probes CRIU, or returns the kept answer while the binary is the
// same. Calls wait for one probe at a time.
func (c *CRIU) Check() CRIUStatus {
	path, err := c.lookPath()
	if err != nil {
		return CRIUStatus{Err: fmt.Errorf("%w: criu not found: %v (install CRIU %s or newer: Debian's package criu)", ErrNoCheckpoint, err, minVersionString())}
	}
	id, err := identify(path)
	if err != nil {
		return CRIUStatus{Path: path, Err: fmt.Errorf("%w: %v", ErrNoCheckpoint, err)}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.binary == id {
		return c.status
	}
	c.status = c.probe(path)
	c.binary = id
	return c.status
}

func (c *CRIU) lookPath() (string, error) {
	name := c.Path
	if name == "" {
		name = "criu"
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return "", err
	}
	return filepath.Abs(path)
}

func minVersionString() string { return CRIUStatus{Version: MinCRIUVersion}.VersionString() }

func (c *CRIU) probe(path string) CRIUStatus {
	st := CRIUStatus{Path: path}
	cr := criu.MakeCriu()
	cr.SetCriuPath(path)
	version, err := cr.GetCriuVersion()
	if err != nil {
		st.Err = fmt.Errorf("%w: %s: ask its version: %v", ErrNoCheckpoint, path, err)
		return st
	}
	st.Version = version
	if version < MinCRIUVersion {
		st.Err = fmt.Errorf("%w: %s is CRIU %s, checkpoints need %s or newer", ErrNoCheckpoint, path, st.VersionString(), minVersionString())
		return st
	}
	if err := c.probeDump(cr); err != nil {
		st.Err = fmt.Errorf("%w: %s (CRIU %s) cannot dump a process on this kernel: %v", ErrNoCheckpoint, path, st.VersionString(), err)
	}
	return st
}

// probeDump dumps a sleep of its own, in its own session, leaving it
// running, then ends it and removes the images. A CRIU that cannot read
// the kernel's features fails here as a container's checkpoint would.
func (c *CRIU) probeDump(cr *criu.Criu) (retErr error) {
	if err := os.MkdirAll(c.ScratchDir, 0o700); err != nil {
		return err
	}
	dir, err := os.MkdirTemp(c.ScratchDir, "criu-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	images, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer images.Close()

	sleep := exec.Command("sleep", strconvSeconds(criuProbeTimeout))
	sleep.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	// From a thread that outlives it: a namespace operation of the daemon
	// ends its thread, and that must not be the one the probe hangs on.
	sleepExited, err := osthread.StartChild(sleep)
	if err != nil {
		return fmt.Errorf("start the probe process: %w", err)
	}
	defer func() {
		_ = sleep.Process.Kill()
		<-sleepExited
	}()

	const logName = "dump.log"
	opts := &rpc.CriuOpts{
		Pid:          new(int32(sleep.Process.Pid)),
		ImagesDirFd:  new(int32(images.Fd())),
		LogFile:      new(logName),
		LogLevel:     new(int32(2)), // errors only: what the message needs
		LeaveRunning: new(true),
	}
	done := make(chan error, 1)
	go func() { done <- cr.Dump(opts, nil) }()
	select {
	case err = <-done:
	case <-time.After(criuProbeTimeout):
		// The sleep ends on its own at the same time, so the dump fails
		// and the goroutine ends.
		err = fmt.Errorf("no answer in %s", criuProbeTimeout)
	}
	if err != nil {
		// go-criu joins the RPC's failure and swrk's exit on two lines.
		msg := strings.ReplaceAll(err.Error(), "\n", "; ")
		if logged := criuLogErrors(filepath.Join(dir, logName)); logged != "" {
			msg += ": " + logged
		}
		return errors.New(msg)
	}
	return nil
}

func strconvSeconds(d time.Duration) string { return fmt.Sprint(int(d.Seconds())) }

// criuLogErrors is the first few "Error (file:line): ..." lines of a CRIU
// log, joined, or "".
func criuLogErrors(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	var errs []string
	for _, line := range bytes.Split(data, []byte("\n")) {
		s := strings.TrimSpace(string(line))
		if i := strings.Index(s, "Error ("); i >= 0 && len(errs) < 4 {
			errs = append(errs, truncate([]byte(s[i:]), 200))
		}
	}
	return strings.Join(errs, "; ")
}
