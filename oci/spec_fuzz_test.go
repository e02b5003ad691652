package oci

import (
	"encoding/json"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// fuzzDevices are the host devices the fuzzer may pick: real, harmless, and
// never a directory the generator would walk.
var fuzzDevices = []string{"/dev/null", "/dev/zero", "/dev/full"}

// FuzzGenerateSpec builds specs from arbitrary container descriptions. The
// generator must never panic, and whatever it accepts must hold what the
// server relies on: the asked-for command and rootfs, clean absolute mount
// destinations, a cgroup path that ends in the container's ID, an
// oom_score_adj no lower than the daemon's own (a lower one makes runc fail
// without CAP_SYS_RESOURCE), capabilities within the daemon's bounding set,
// and a config.json that encodes. The seed corpus is under
// testdata/fuzz/FuzzGenerateSpec and runs with every `go test`.
func FuzzGenerateSpec(f *testing.F) {
	f.Add("abc", "/bin/sh\x00-c\x00echo hi", "/work", "/data", "vol", uint8(0), false, "NET_ADMIN", "", int64(512), int64(50000), int64(100000), int64(64<<20), int64(-997), "0-1", "/pod", false, false, uint8(0), "", "/dev/n")
	f.Add("c0ffee", "true", "", "/data/../x", "a/../../b", uint8(2), true, "ALL", "CHOWN", int64(-1), int64(-1), int64(0), int64(-1), int64(1000), "", "kubepods.slice", true, true, uint8(1), "/proc/1/ns/net", "")
	f.Add("x", "", "rel", "rel", "", uint8(9), false, "FLY", "", int64(0), int64(0), int64(0), int64(0), int64(0), "all", "p.slice", false, false, uint8(7), "rel", "dev")
	f.Fuzz(func(t *testing.T, id, args, cwd, mountDst, mountSrc string, propagation uint8, readonly bool,
		addCap, dropCap string, shares, quota, period, memory, oomAdj int64, cpuset, cgroupParent string,
		systemd, privileged bool, netMode uint8, netPath, deviceDst string) {
		tmp := t.TempDir()
		src := filepath.Join(tmp, mountSrc)
		if !strings.HasPrefix(src, tmp) {
			return // the generator creates missing sources: keep them in the temp dir
		}
		c := ContainerSpec{
			ID:     id,
			Rootfs: "/rootfs",
			Args:   splitNonEmpty(args),
			Cwd:    cwd,
			Mounts: []Mount{{ContainerPath: mountDst, HostPath: src, Readonly: readonly, Propagation: Propagation(propagation)}},
			Resources: &Resources{
				CPUShares: shares, CPUQuota: quota, CPUPeriod: period,
				MemoryLimitBytes: memory, OomScoreAdj: oomAdj, CpusetCpus: cpuset,
			},
			Security:     Security{Privileged: privileged, AddCapabilities: splitNonEmpty(addCap), DropCapabilities: splitNonEmpty(dropCap)},
			Namespaces:   Namespaces{Network: Namespace{Mode: NamespaceMode(netMode), Path: netPath}},
			CgroupParent: cgroupParent,
		}
		if deviceDst != "" {
			c.Devices = []Device{{HostPath: fuzzDevices[len(deviceDst)%len(fuzzDevices)], ContainerPath: deviceDst}}
		}
		if systemd {
			c.CgroupDriver = SystemdDriver
		}
		h := testHost()
		h.oomScoreAdj = -500
		s, err := generateSpec(&c, h)
		if err != nil {
			return
		}
		checkGeneratedSpec(t, &c, h, s)
	})
}

func checkGeneratedSpec(t *testing.T, c *ContainerSpec, h hostFacts, s *specs.Spec) {
	t.Helper()
	if s.Root == nil || s.Root.Path != c.Rootfs {
		t.Fatalf("root = %+v, want %s", s.Root, c.Rootfs)
	}
	if s.Process == nil || !slices.Equal(s.Process.Args, c.Args) || len(s.Process.Args) == 0 {
		t.Fatalf("args = %q, want %q", s.Process.Args, c.Args)
	}
	if !path.IsAbs(s.Process.Cwd) {
		t.Fatalf("cwd %q is not absolute", s.Process.Cwd)
	}
	for _, m := range s.Mounts {
		if !path.IsAbs(m.Destination) || path.Clean(m.Destination) != m.Destination {
			t.Fatalf("mount destination %q is not clean and absolute", m.Destination)
		}
	}
	if c.CgroupDriver == SystemdDriver {
		if !strings.HasSuffix(s.Linux.CgroupsPath, ":"+c.ID) {
			t.Fatalf("systemd cgroups path %q does not end in the ID %q", s.Linux.CgroupsPath, c.ID)
		}
	} else if !path.IsAbs(s.Linux.CgroupsPath) || path.Base(s.Linux.CgroupsPath) != c.ID {
		t.Fatalf("cgroups path %q is not an absolute path ending in the ID %q", s.Linux.CgroupsPath, c.ID)
	}
	if adj := s.Process.OOMScoreAdj; adj != nil && (*adj < h.oomScoreAdj || *adj > 1000) {
		t.Fatalf("oom_score_adj %d is outside %d..1000", *adj, h.oomScoreAdj)
	}
	available := h.availableCaps()
	for _, name := range s.Process.Capabilities.Bounding {
		if n, ok := capabilityNumbers[name]; !ok || !available.has(n) {
			t.Fatalf("capability %s is not in the daemon's bounding set", name)
		}
	}
	if _, err := json.Marshal(s); err != nil {
		t.Fatalf("spec does not encode: %v", err)
	}
}

func splitNonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "\x00")
}
