package network

import (
	"os"
	"reflect"
	"testing"
)

func TestParseNetDev(t *testing.T) {
	const data = `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:     840      10    0    0    0     0          0         0      840      10    0    0    0     0       0          0
  eth0:    1296      16    1    2    0     0          0         0      936      12    3    4    0     0       0          0
`
	got, err := parseNetDev(data)
	if err != nil {
		t.Fatal(err)
	}
	want := []InterfaceCounters{{Name: "eth0", RxBytes: 1296, RxPackets: 16, RxErrors: 1, RxDropped: 2, TxBytes: 936, TxPackets: 12, TxErrors: 3, TxDropped: 4}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parseNetDev = %+v, want %+v (loopback left out)", got, want)
	}
	if _, err := parseNetDev("h1\nh2\n  eth0: 1 2 3\n"); err == nil {
		t.Fatal("a truncated line parsed without error")
	}
}

// The host's own namespace stands in for a pod's: the counters come from the
// namespace joined, read on a thread of its own.
func TestReadInterfaceCountersOfAPinnedNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("joining a network namespace needs CAP_SYS_ADMIN")
	}
	if _, err := ReadInterfaceCounters("/proc/self/ns/net"); err != nil {
		t.Fatalf("read counters of the host's namespace: %v", err)
	}
	if _, err := ReadInterfaceCounters("/nonexistent/netns"); err == nil {
		t.Fatal("a missing namespace file read without error")
	}
}
