package oci

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// DefaultAppArmorProfile is the profile RuntimeDefault applies on an AppArmor
// host. minicri does not generate or load it: the node's setup must load a
// profile of this name (apparmor_parser), or RuntimeDefault fails with a message
// saying so rather than running the container unconfined.
const DefaultAppArmorProfile = "minicri-default"

// appArmorProfilesPath lists the loaded profiles; tests replace it.
var appArmorProfilesPath = "/sys/kernel/security/apparmor/profiles"

// appArmorFor picks the process's AppArmor profile. Without AppArmor in the
// kernel every request is ignored, as the kubelet expects of such nodes.
// Privileged containers are unconfined unless a Localhost profile is named.
func appArmorFor(sec Security, h hostFacts) (string, error) {
	if !h.apparmor {
		return "", nil
	}
	var name string
	switch sec.AppArmor.Type {
	case ProfileUnconfined:
		return "", nil
	case ProfileRuntimeDefault:
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
	loaded, err := appArmorProfileLoaded(appArmorProfilesPath, name)
	if err != nil {
		return "", err
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
