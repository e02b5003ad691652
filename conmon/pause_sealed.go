package conmon

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// The infra process runs from a sealed in-memory copy of minicri-pause,
// made once per daemon from the installed file, as runc runs from one of
// itself (CVE-2019-5736):
//
//   - a container with CAP_SYS_PTRACE in a PID-sharing pod holds the infra
//     process's /proc/1/exe; it is the copy, which no one can write (the
//     seals) or reach on the host, not the host's binary;
//   - the exec goes through the daemon's descriptor (/proc/self/fd/N of
//     the child), so no directory's permission decides whether a pod's
//     infra starts: the one of a user-namespaced pod is exec'd as the pod's
//     mapped root, a host uid that may search none of the directories above
//     the installed binary (a checkout under /root, a mktemp dir).

// pauseSeals make the copy immutable for good: no write, no resize, no
// further change of seals.
const pauseSeals = unix.F_SEAL_WRITE | unix.F_SEAL_GROW | unix.F_SEAL_SHRINK | unix.F_SEAL_SEAL

// pauseExecFD is the copy's descriptor in the infra process's child, after
// stdio and the readiness pipe (fd 3); the go pipe (pauseGoFD) follows it.
// minicri-pause closes both once the daemon has recorded it (close_range
// from fd 4).
const pauseExecFD = 4

var sealedPauses struct {
	mu     sync.Mutex
	copies map[string]*os.File // by the installed binary's path
}

// sealedPause returns the sealed copy of the binary at path, made at the
// first call for that path and kept for the daemon's life: an upgrade of the
// installed file takes effect at the daemon's restart, as for the monitor.
func sealedPause(path string) (*os.File, error) {
	sealedPauses.mu.Lock()
	defer sealedPauses.mu.Unlock()
	if f, ok := sealedPauses.copies[path]; ok {
		return f, nil
	}
	f, err := sealCopy(path)
	if err != nil {
		return nil, err
	}
	if sealedPauses.copies == nil {
		sealedPauses.copies = map[string]*os.File{}
	}
	sealedPauses.copies[path] = f
	return f, nil
}

// sealCopy copies the file at path into a new memfd and seals it.
func sealCopy(path string) (*os.File, error) {
	src, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s (make install puts it beside minicri-conmon): %v", ErrNoPauseBinary, path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("sealed copy of %s: %w", path, err)
	}
	defer src.Close()
	fd, err := memfdExec(PauseBinaryName)
	if err != nil {
		return nil, fmt.Errorf("sealed copy of %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), "memfd:"+PauseBinaryName)
	if err := fillAndSeal(f, src); err != nil {
		f.Close()
		return nil, fmt.Errorf("sealed copy of %s: %w", path, err)
	}
	return f, nil
}

// memfdExec makes an executable memfd that takes seals. MFD_EXEC (Linux
// 6.3) keeps it executable under vm.memfd_noexec=1; an older kernel
// refuses the flag, and every memfd of it is executable.
func memfdExec(name string) (int, error) {
	const flags = unix.MFD_CLOEXEC | unix.MFD_ALLOW_SEALING
	fd, err := unix.MemfdCreate(name, flags|unix.MFD_EXEC)
	if errors.Is(err, unix.EINVAL) {
		fd, err = unix.MemfdCreate(name, flags)
	}
	if err != nil {
		return -1, fmt.Errorf("memfd_create: %w", err)
	}
	return fd, nil
}

func fillAndSeal(f, src *os.File) error {
	st, err := src.Stat()
	if err != nil {
		return err
	}
	n, err := io.Copy(f, src)
	if err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	if n != st.Size() {
		return fmt.Errorf("copied %d bytes of %d: the file changed meanwhile", n, st.Size())
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, pauseSeals); err != nil {
		return fmt.Errorf("seal: %w", err)
	}
	return nil
}
