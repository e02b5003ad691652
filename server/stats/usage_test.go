package stats

import (
	"slices"
	"testing"

	"github.com/minicri/minicri/network"
)

// A pod's network usage always has its default interface, eth0, or is not
// reported: the kubelet's stats summary reads the default interface of any
// usage it gets, and crashed on a pod whose eth0 a StopPodSandbox had just
// removed.
func TestNetworkUsageHasItsDefaultInterfaceOrIsNone(t *testing.T) {
	eth0 := network.InterfaceCounters{Name: network.PodInterface, RxBytes: 7}
	tunl0 := network.InterfaceCounters{Name: "tunl0"}
	tests := []struct {
		name      string
		ifs       []network.InterfaceCounters
		wantNames []string // nil: no usage
	}{
		{"eth0 and another", []network.InterfaceCounters{tunl0, eth0}, []string{"tunl0", "eth0"}},
		{"eth0 alone", []network.InterfaceCounters{eth0}, []string{"eth0"}},
		{"eth0 gone, another left", []network.InterfaceCounters{tunl0}, nil},
		{"no interface", nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u := NetworkUsage(42, tc.ifs)
			if tc.wantNames == nil {
				if u != nil {
					t.Fatalf("usage %v, want none", u)
				}
				return
			}
			if u.GetDefaultInterface().GetName() != network.PodInterface || u.GetDefaultInterface().GetRxBytes().GetValue() != 7 {
				t.Errorf("default interface %v, want eth0's counters", u.GetDefaultInterface())
			}
			var names []string
			for _, i := range u.GetInterfaces() {
				names = append(names, i.GetName())
			}
			if !slices.Equal(names, tc.wantNames) {
				t.Errorf("interfaces %v, want %v", names, tc.wantNames)
			}
		})
	}
}
