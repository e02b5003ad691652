package network

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/internal/osthread"
)

// InterfaceCounters are the kernel's counters of one network interface.
type InterfaceCounters struct {
	Name                                    string
	RxBytes, RxPackets, RxErrors, RxDropped uint64
	TxBytes, TxPackets, TxErrors, TxDropped uint64
}

// ReadInterfaceCounters reads the counters of the interfaces in the network
// namespace pinned at netnsPath, loopback left out (cAdvisor leaves it out
// too: it is traffic within the pod).
//
// /proc/net/dev shows the namespace of the thread that reads it, so one
// throwaway thread joins the pod's namespace and reads
// /proc/thread-self/net/dev: no process needs to run in the pod, nothing is
// spawned, and the thread dies with the namespace it joined. (sysfs's
// /sys/class/net would show the namespace sysfs was mounted in instead.)
func ReadInterfaceCounters(netnsPath string) ([]InterfaceCounters, error) {
	f, err := os.Open(netnsPath)
	if err != nil {
		return nil, fmt.Errorf("open network namespace: %w", err)
	}
	defer f.Close()
	var data []byte
	err = osthread.Throwaway(func() error {
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("join network namespace %s: %w", netnsPath, err)
		}
		var err error
		data, err = os.ReadFile("/proc/thread-self/net/dev")
		return err
	})
	if err != nil {
		return nil, err
	}
	return parseNetDev(string(data))
}

// parseNetDev parses /proc/net/dev: two header lines, then per interface
// "name: rx bytes packets errs drop fifo frame compressed multicast tx bytes
// packets errs drop fifo colls carrier compressed".
func parseNetDev(data string) ([]InterfaceCounters, error) {
	var out []InterfaceCounters
	for i, line := range strings.Split(data, "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if i < 2 || !ok {
			continue
		}
		name = strings.TrimSpace(name)
		if name == "lo" {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 16 {
			return nil, fmt.Errorf("malformed /proc/net/dev line %q", line)
		}
		var v [16]uint64
		for j := range v {
			n, err := strconv.ParseUint(f[j], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("malformed /proc/net/dev line %q: %w", line, err)
			}
			v[j] = n
		}
		out = append(out, InterfaceCounters{
			Name:    name,
			RxBytes: v[0], RxPackets: v[1], RxErrors: v[2], RxDropped: v[3],
			TxBytes: v[8], TxPackets: v[9], TxErrors: v[10], TxDropped: v[11],
		})
	}
	return out, nil
}
