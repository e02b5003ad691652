package config

import (
	"fmt"

	sdutil "github.com/coreos/go-systemd/v22/util"
)

// The values of cgroup_driver; unset ("") means detect.
const (
	CgroupfsDriver = "cgroupfs"
	SystemdDriver  = "systemd"
)

// Node is what the node decides of the keys left unset: the facts a
// default follows, looked at once (ThisNode) and handed in, so that a test
// can say what node it is on.
type Node struct {
	// SystemdBooted: systemd is PID 1, as sd_booted(3) decides
	// (/run/systemd/system is a directory).
	SystemdBooted bool
}

// ThisNode looks at the node the process runs on.
func ThisNode() Node {
	return Node{SystemdBooted: sdutil.IsRunningSystemd()}
}

// CgroupDriverChoice is the cgroup driver in force and how it was chosen.
type CgroupDriverChoice struct {
	Driver string `json:"driver"`
	// Source is "detected" (cgroup_driver unset) or "configured".
	Source string `json:"source"`
	// Reason says why this driver, in an operator's words.
	Reason string `json:"reason"`
}

// The sources of a CgroupDriverChoice.
const (
	Detected   = "detected"
	Configured = "configured"
)

// ResolveCgroupDriver decides the driver of a configured cgroup_driver on
// node. Unset follows the node: systemd where systemd is PID 1 (what
// kubeadm and cri-o default to), since two managers of one cgroup tree
// (systemd and cgroupfs beside it) are what Kubernetes warns against;
// cgroupfs elsewhere, where there is no other. A value given always wins, but systemd
// without systemd cannot place a single container, so it is refused here,
// at start, rather than at the first pod.
func ResolveCgroupDriver(configured string, node Node) (CgroupDriverChoice, error) {
	switch {
	case configured == "" && node.SystemdBooted:
		return CgroupDriverChoice{SystemdDriver, Detected, "systemd is PID 1 (/run/systemd/system exists)"}, nil
	case configured == "":
		return CgroupDriverChoice{CgroupfsDriver, Detected, "systemd is not PID 1 (no /run/systemd/system)"}, nil
	case configured == SystemdDriver && !node.SystemdBooted:
		return CgroupDriverChoice{}, &InvalidError{"cgroup_driver", `"systemd" cannot work on this node: systemd is not PID 1 (no /run/systemd/system), so there is no systemd to make the pods' slices and scopes; leave cgroup_driver unset to use cgroupfs here`}
	case configured == CgroupfsDriver && node.SystemdBooted:
		return CgroupDriverChoice{CgroupfsDriver, Configured, "set in the configuration, although systemd is PID 1 here and also manages the cgroup tree (unset, the driver would be systemd)"}, nil
	default:
		return CgroupDriverChoice{configured, Configured, "set in the configuration"}, nil
	}
}

// nodeNote is what Render says of a key whose default follows the node:
// a note for the comment above it, and, for the key left unset, the value
// it resolves to, which Render writes commented out. Both are empty for
// any other key. The note speaks of where the file was written: make
// install writes it on one machine for another.
func nodeNote(key string, cfg Config, node Node) (note, resolved string) {
	if key != "cgroup_driver" {
		return "", ""
	}
	d, err := ResolveCgroupDriver(cfg.CgroupDriver, node)
	switch {
	case err != nil:
		return fmt.Sprintf("Where this file was written the daemon refuses this value: %v.", err), ""
	case d.Source == Detected:
		return fmt.Sprintf("Where this file was written, unset means %s: %s.", d.Driver, d.Reason), d.Driver
	}
	return "", ""
}
