package server

import (
	"errors"
	"fmt"

	"github.com/minicri/minicri/internal/kernelfeat"
)

// errKernelNoUserNamespaces: this kernel cannot give a pod a user namespace
// of its own, whatever the runtime (FailedPrecondition: the node's
// condition, not the request's fault).
var errKernelNoUserNamespaces = errors.New("this kernel cannot run a pod in a user namespace of its own")

// userNamespaceKernelFeatures are what a pod in a user namespace needs of
// the kernel, beyond the runtime's idmapped mounts: idmapped tmpfs mounts
// (Linux 6.3) for its /dev/shm and the kubelet's projected volumes (every
// pod's service account token), and an overlay over idmapped layers on the
// image store's filesystem (5.19) for its rootfs. The kubelet asks for
// 6.3 too; containerd and cri-o fail such a pod at start on older kernels,
// minicri says so in Status and refuses it at once.
var userNamespaceKernelFeatures = []*kernelfeat.Feature{kernelfeat.IDMappedTmpfs, kernelfeat.IDMappedOverlay}

// kernelUserNamespaces says why this kernel cannot run a pod in a user
// namespace, or nil.
func kernelUserNamespaces() error {
	for _, f := range userNamespaceKernelFeatures {
		if a := f.Get(); !a.Supported {
			return fmt.Errorf("%w: %s: %s (idmapped tmpfs mounts need Linux 6.3, for the pod's /dev/shm and projected volumes; docs/security.md)", errKernelNoUserNamespaces, f.Name, a.Reason)
		}
	}
	return nil
}
