package server

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/conmon/wire"
	"github.com/minicri/minicri/server/internal/lifecycle"
)

// specUser is the identity written into the container's config.json.
func specUser(spec *specs.Spec) *lifecycle.ContainerUser {
	if spec == nil || spec.Process == nil {
		return nil
	}
	u := spec.Process.User
	out := &lifecycle.ContainerUser{UID: int64(u.UID), GID: int64(u.GID), Groups: make([]int64, 0, len(u.AdditionalGids))}
	for _, g := range u.AdditionalGids {
		out.Groups = append(out.Groups, int64(g))
	}
	return out
}

// runningUser reads what the container's init process got, from
// /proc/PID/status: the identity KEP-3619 asks the runtime to report.
// containerd 2.x reports its OCI spec's user instead, which a runtime or
// the kernel may not have applied as written (a runtime that drops or adds
// a group, a groups list past NGROUPS_MAX). The pid is the one the runtime
// wrote at create, in the bundle. ok is false when the process is gone
// already; the caller then keeps the config's user.
func runningUser(bundle string) (u *lifecycle.ContainerUser, ok bool) {
	pid, ok := bundlePID(bundle)
	if !ok {
		return nil, false
	}
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return nil, false
	}
	u, err = parseProcStatusUser(status)
	return u, err == nil
}

// bundlePID is the container's init, as the runtime wrote it at create.
func bundlePID(bundle string) (int, bool) {
	data, err := os.ReadFile(filepath.Join(bundle, wire.PIDFile))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(data)))
	return pid, err == nil && pid > 0
}

// parseProcStatusUser takes the effective uid and gid and the supplementary
// groups from the text of /proc/PID/status.
func parseProcStatusUser(status []byte) (*lifecycle.ContainerUser, error) {
	u := &lifecycle.ContainerUser{Groups: []int64{}}
	var seen int
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(value)
		switch key {
		case "Uid", "Gid":
			// real, effective, saved, filesystem
			if len(fields) < 2 {
				return nil, fmt.Errorf("/proc status %s: %q", key, value)
			}
			id, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("/proc status %s: %w", key, err)
			}
			if key == "Uid" {
				u.UID = id
			} else {
				u.GID = id
			}
			seen++
		case "Groups":
			for _, f := range fields {
				g, err := strconv.ParseInt(f, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("/proc status Groups: %w", err)
				}
				u.Groups = append(u.Groups, g)
			}
			seen++
		}
	}
	if seen != 3 {
		return nil, fmt.Errorf("/proc status: Uid, Gid or Groups missing")
	}
	return u, nil
}

// criUser is the CRI form of a container's user; nil when unknown (a
// record from before users were kept).
func criUser(u *lifecycle.ContainerUser) *runtime.ContainerUser {
	if u == nil {
		return nil
	}
	return &runtime.ContainerUser{Linux: &runtime.LinuxContainerUser{Uid: u.UID, Gid: u.GID, SupplementalGroups: u.Groups}}
}
