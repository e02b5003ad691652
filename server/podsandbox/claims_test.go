package podsandbox

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/server/internal/testreq"
)

func usernsPodConfig(uids, gids []*runtime.IDMapping) *runtime.PodSandboxConfig {
	cfg := testreq.Sandbox()
	cfg.Linux = &runtime.LinuxPodSandboxConfig{SecurityContext: &runtime.LinuxSandboxSecurityContext{
		NamespaceOptions: &runtime.NamespaceOption{UsernsOptions: &runtime.UserNamespace{Mode: runtime.NamespaceMode_POD, Uids: uids, Gids: gids}}}}
	return cfg
}

// A pod whose host ranges overlap a ready, creating or claimed pod's is
// refused, naming the field; a stopped pod's and disjoint ranges are not.
func TestClaimHostIDsRefusesOverlaps(t *testing.T) {
	const field = "config.linux.security_context.namespace_options.userns_options"
	s := newTestController(t)
	put := func(id string, state lifecycle.SandboxRecordState, cfg *runtime.PodSandboxConfig) {
		raw, err := proto.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.deps.Records.Put(id, lifecycle.SandboxRecord{ID: id, State: state, Config: raw}); err != nil {
			t.Fatal(err)
		}
	}
	kubelet := testreq.IDMaps([3]uint32{0, 65536, 65536})
	put("ready", lifecycle.StateReady, usernsPodConfig(kubelet, kubelet))
	put("stopped", lifecycle.StateNotReady, usernsPodConfig(testreq.IDMaps([3]uint32{0, 1000, 65536}), testreq.IDMaps([3]uint32{0, 1000, 65536})))
	put("creating", lifecycle.StateCreating, usernsPodConfig(testreq.IDMaps([3]uint32{0, 300000, 65536}), testreq.IDMaps([3]uint32{0, 300000, 65536})))
	put("host", lifecycle.StateReady, testreq.Sandbox())
	release, err := s.ClaimHostIDs("claimed", usernsPodConfig(testreq.IDMaps([3]uint32{0, 500000, 65536}), testreq.IDMaps([3]uint32{0, 500000, 65536})))
	if err != nil {
		t.Fatal(err)
	}
	free := testreq.IDMaps([3]uint32{0, 700000, 65536})
	cases := []struct {
		name       string
		uids, gids []*runtime.IDMapping
		field, pod string
	}{
		{"the ready pod's uids, one ID in", testreq.IDMaps([3]uint32{0, 131071, 65536}), free, field + ".uids", "ready"},
		{"the ready pod's gids", free, testreq.IDMaps([3]uint32{0, 1, 65536}), field + ".gids", "ready"},
		{"a creating pod's", testreq.IDMaps([3]uint32{0, 300000 + 65535, 1}), free, field + ".uids", "creating"},
		{"a claimed pod's", free, testreq.IDMaps([3]uint32{0, 500000, 1}), field + ".gids", "claimed"},
		{"a stopped pod's", testreq.IDMaps([3]uint32{0, 1000, 1000}), testreq.IDMaps([3]uint32{0, 1000, 1000}), "", ""},
		{"right after the ready pod's", testreq.IDMaps([3]uint32{0, 131072, 65536}), testreq.IDMaps([3]uint32{0, 131072, 65536}), "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rel, err := s.ClaimHostIDs("new", usernsPodConfig(c.uids, c.gids))
			if c.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				rel()
				return
			}
			if err == nil {
				rel()
				t.Fatalf("accepted; want %s refused", c.field)
			}
			if got := err.Error(); !strings.Contains(got, c.field+":") || !strings.Contains(got, "pod sandbox "+c.pod) {
				t.Fatalf("error %q; want it to name %s and pod sandbox %s", got, c.field, c.pod)
			}
		})
	}
	release()
	if rel, err := s.ClaimHostIDs("again", usernsPodConfig(testreq.IDMaps([3]uint32{0, 500000, 1}), free)); err != nil {
		t.Fatalf("a released claim still refuses: %v", err)
	} else {
		rel()
	}
}
