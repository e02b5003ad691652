package network

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/internal/procstat"
)

// The plugin lock: a file in the CNI cache dir that the daemon flocks and
// whose descriptor every plugin it runs inherits (pluginExec). The kernel
// drops a flock when the last descriptor of its open file closes, so after
// a daemon dies the lock stays held while any plugin it started still
// runs. A killed daemon's ADD may still be taking an address; the next
// daemon waits for the lock before its recovery rolls a half-made pod's
// attachment back, or the DEL could come first and the address stay
// allocated. docs/reliability.md.

// pluginLockName is the lock file in the CNI cache dir.
const pluginLockName = "plugins.lock"

// pluginLockPoll is how often a waiting daemon tries the lock again.
const pluginLockPoll = 50 * time.Millisecond

// AwaitOrphanPlugins waits, up to wait, for the plugins a previous daemon
// started to end, then holds the plugin lock that the plugins this daemon
// runs inherit. Plugins still running at the deadline (a hung one) are
// logged by pid and left: the lock file is replaced by a new one, so that
// they hold up no later start, and the daemon goes on. Call it once, before
// the recovery tears down any attachment.
func (c *CNI) AwaitOrphanPlugins(wait time.Duration) error {
	// The cache dir is in the state root, which its own lock guards.
	if err := os.MkdirAll(c.cacheDir, 0o700); err != nil {
		return fmt.Errorf("cni plugin lock: %w", err)
	}
	path := filepath.Join(c.cacheDir, pluginLockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("cni plugin lock: %w", err)
	}
	start := time.Now()
	for logged := false; ; {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return fmt.Errorf("cni plugin lock %s: %w", path, err)
		}
		// The holders are searched for only to be named, twice at most.
		if time.Since(start) > wait {
			c.log.WithField("holders", procstat.FileHolders(f).String()).WithField("waited", wait.String()).
				Warn("CNI plugins of the previous daemon still run: going on without them; an address they take now may stay allocated")
			f.Close()
			if f, err = replaceLockFile(path); err != nil {
				return err
			}
			break
		}
		if !logged {
			c.log.WithField("holders", procstat.FileHolders(f).String()).Info("waiting for the CNI plugins the previous daemon started to end")
			logged = true
		}
		time.Sleep(pluginLockPoll)
	}
	if waited := time.Since(start); waited > pluginLockPoll {
		c.log.WithField("waited", waited.Round(time.Millisecond).String()).Info("took the CNI plugin lock")
	}
	c.exec.lock.Store(f)
	return nil
}

// replaceLockFile puts a new, locked lock file at path in place of one that
// processes nobody waits for any more still hold.
func replaceLockFile(path string) (*os.File, error) {
	tmp := path + ".new"
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cni plugin lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("cni plugin lock %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		f.Close()
		return nil, fmt.Errorf("cni plugin lock: %w", err)
	}
	return f, nil
}

// Close lets go of the plugin lock; plugins still running keep it held.
func (c *CNI) Close() {
	if f := c.exec.lock.Swap(nil); f != nil {
		f.Close()
	}
}
