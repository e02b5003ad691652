package oci

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// DefaultAppArmorProfile is the profile an unprivileged container gets on an
// AppArmor host when it names none or asks for RuntimeDefault. The daemon
// loads it at start (EnsureDefaultAppArmorProfile); when it is not loaded,
// such a container fails with a message saying so rather than running
// unconfined.
const DefaultAppArmorProfile = "minicri-default"

// appArmorProfilesPath lists the loaded profiles.
const appArmorProfilesPath = "/sys/kernel/security/apparmor/profiles"

// appArmorFor picks the process's AppArmor profile. Without AppArmor in the
// kernel every request is ignored, as the kubelet expects of such nodes.
// A container that names no profile gets the default one, as with containerd
// and cri-o. Privileged containers are unconfined unless a Localhost profile
// is named.
func appArmorFor(sec Security, h hostFacts) (string, error) {
	if !h.apparmor {
		return "", nil
	}
	var name string
	switch sec.AppArmor.Type {
	case ProfileUnconfined:
		return "", nil
	case ProfileUnset, ProfileRuntimeDefault:
		if sec.Privileged {
			return "", nil
		}
		name = DefaultAppArmorProfile
	case ProfileLocalhost:
		name = strings.TrimPrefix(sec.AppArmor.LocalhostName, "localhost/")
		if name == "" {
			return "", fmt.Errorf("%w: AppArmor localhost profile names no profile", ErrInvalid)
		}
	default:
		return "", fmt.Errorf("%w: unknown AppArmor profile type %d", ErrInvalid, sec.AppArmor.Type)
	}
	loaded, err := appArmorProfileLoaded(h.appArmorProfiles, name)
	if err != nil {
		return "", err
	}
	if !loaded && name == DefaultAppArmorProfile {
		return "", fmt.Errorf("%w: the default AppArmor profile %q is not loaded on this node: the daemon loads it at start, see its log", ErrInvalid, name)
	}
	if !loaded {
		return "", fmt.Errorf("%w: AppArmor profile %q is not loaded on this node", ErrInvalid, name)
	}
	return name, nil
}

// appArmorProfileLoaded looks for "NAME (mode)" in the kernel's profile list.
func appArmorProfileLoaded(listPath, name string) (bool, error) {
	f, err := os.Open(listPath)
	if err != nil {
		return false, fmt.Errorf("read loaded AppArmor profiles: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.LastIndex(line, " ("); i >= 0 {
			line = line[:i]
		}
		if line == name {
			return true, nil
		}
	}
	return false, sc.Err()
}

// InfraAppArmorProfile is the AppArmor profile of a pod's infra process
// (minicri-pause), chosen as a container's is from the pod's own profile and
// privilege: the default profile on an AppArmor host unless the pod asks
// for another or is privileged; "" without AppArmor. containerd and cri-o
// confine their pause container the same way.
func InfraAppArmorProfile(p AppArmorProfile, privileged bool) (string, error) {
	return appArmorFor(Security{AppArmor: p, Privileged: privileged}, currentHost())
}
