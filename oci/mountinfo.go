package oci

import (
	"fmt"

	"github.com/minicri/minicri/internal/mountinfo"
)

// checkSourcePropagation refuses a propagating bind whose source cannot
// propagate: without it the container would silently see no mount events. A
// Bidirectional mount needs a shared source mount; HostToContainer needs a
// shared or slave one, in the mount table at mountInfo. This mirrors
// containerd's check.
func checkSourcePropagation(mountInfo, source string, p Propagation) error {
	if p == PropagationPrivate {
		return nil
	}
	m, err := mountinfo.Lookup(mountInfo, source)
	if err != nil {
		return fmt.Errorf("check propagation of mount source %s: %w", source, err)
	}
	switch {
	case p == PropagationBidirectional && !mountinfo.Shared(m):
		return fmt.Errorf("%w: mount source %s is on %s, which is not a shared mount (bidirectional propagation needs one)", ErrInvalid, source, m.Mountpoint)
	case p == PropagationHostToContainer && !mountinfo.Shared(m) && !mountinfo.Slave(m):
		return fmt.Errorf("%w: mount source %s is on %s, which is neither a shared nor a slave mount (host-to-container propagation needs one)", ErrInvalid, source, m.Mountpoint)
	}
	return nil
}
