//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestSIGHUPStormLetsNoUnsignedImageThrough: forty SIGHUPs while pulls of
// an unsigned image and of one signed by another key run, the file
// flipping between the policy and a file that does not parse: no pull of
// either gets through (each is refused by the policy, whichever
// configuration it started under), nothing of them is stored, the daemon
// stays up with its pid, and the signed image still pulls.
func TestSIGHUPStormLetsNoUnsignedImageThrough(t *testing.T) {
	s := pushSignedImages(t)
	policy := filepath.Join(t.TempDir(), "policy.json")
	writeFile(t, policy, s.sigstorePolicy(t), 0o644)
	good := fmt.Sprintf("[image]\npull_timeout = \"5m\"\nsignature_policy = %q\n", policy)
	d := StartDaemon(t, WithConfig(good))
	configFile := filepath.Join(d.Dir, "minicri.toml")
	pid := d.cmd.Process.Pid

	var wg sync.WaitGroup
	stop := make(chan struct{})
	go func() { // the storm: no t.Fatal off the test's goroutine
		defer close(stop)
		for i := 0; i < 40; i++ {
			body := good
			if i%2 == 1 {
				body = "[image\n"
			}
			if err := writeFileAtomic(configFile, body); err != nil {
				t.Errorf("write the config: %v", err)
				return
			}
			if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
				t.Errorf("SIGHUP: %v", err)
				return
			}
			time.Sleep(20 * time.Millisecond) // signals that come together are one
		}
	}()
	var got []string
	var mu sync.Mutex
	var pulls atomic.Int32
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ { // until the storm ends
				select {
				case <-stop:
					return
				default:
				}
				ref := s.unsigned.ref
				if (w+i)%2 == 1 {
					ref = s.other.ref
				}
				_, err := d.pullErr(ref, nil)
				pulls.Add(1)
				mu.Lock()
				if status.Code(err) != codes.FailedPrecondition {
					got = append(got, fmt.Sprintf("%s: %v", ref, err))
				}
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	if len(got) == 0 && pulls.Load() < 8 {
		t.Errorf("%d pulls during the storm: too few to say anything", pulls.Load())
	}
	for _, g := range got {
		t.Errorf("pull during the storm not refused by the policy: %s", g)
	}
	writeFile(t, configFile, good, 0o644)
	if d.cmd.ProcessState != nil || d.cmd.Process.Pid != pid {
		t.Fatalf("the daemon did not survive the storm (pid %d, was %d)", d.cmd.Process.Pid, pid)
	}
	for _, img := range d.listImages(t, "") {
		for _, digest := range []string{s.unsigned.id, s.other.id} {
			if img.GetId() == digest {
				t.Errorf("image %s is stored after the storm", digest)
			}
		}
	}
	if left := filesBelow(t, filepath.Join(d.Root, "image", "tmp")); len(left) != 0 {
		t.Errorf("image/tmp after the storm: %v", left)
	}
	if id := d.pull(t, s.signed.ref); id != s.signed.id {
		t.Fatalf("PullImage of the signed image after the storm = %s, want %s", id, s.signed.id)
	}
	if !strings.Contains(d.Output(), "SIGHUP: configuration not reloaded") {
		t.Errorf("no SIGHUP met the broken file: the storm proved less than it says")
	}
}

// writeFileAtomic replaces path by a rename, as an operator's tooling
// should: a reload never reads half a file (an empty one would be the
// defaults, with no policy).
func writeFileAtomic(path, body string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
