package server

import (
	"fmt"
	"os"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
	"github.com/minicri/minicri/image"
	"github.com/minicri/minicri/internal/kernelfeat"
	"github.com/minicri/minicri/oci"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/server/validate"
)

// rootfsStore makes and removes the containers' root filesystems and image
// volumes in the image store (*image.Store); Rootfses lists them for the
// start-up sweep.
type rootfsStore interface {
	PrepareRootfs(id, imageID string) error
	PrepareImageVolume(id, imageID string) error
	RemoveRootfs(id string) error
	Rootfses() []string
}

// rootfsMounter mounts a prepared root filesystem or image volume,
// idmapped for a pod with a user namespace of its own (*image.Store).
type rootfsMounter interface {
	MountRootfs(id string) (string, error)
	MountRootfsIDMapped(id string, idmap image.IDMap) (string, error)
	RootfsPath(id string) string // where the Mount calls mount rootfs id
}

// imageVolumeSep joins a container ID and the index of one of its image
// volumes into that volume's rootfs ID. A container ID is hex, so the owner
// of any rootfs is the part before it (rootfsOwner).
const imageVolumeSep = ".iv"

func imageVolumeID(containerID string, mount int) string {
	return fmt.Sprintf("%s%s%d", containerID, imageVolumeSep, mount)
}

// rootfsOwner is the container a rootfs of the image store belongs to.
func rootfsOwner(rootfsID string) string {
	owner, _, _ := strings.Cut(rootfsID, imageVolumeSep)
	return owner
}

// resolveImageVolumes finds the images of the container's image volumes.
// The kubelet pulls them first, as it pulls the container's image: a
// missing one is NotFound, not pulled here.
func (s *Server) resolveImageVolumes(containerID string, cfg *runtime.ContainerConfig) ([]lifecycle.ImageVolume, error) {
	var vols []lifecycle.ImageVolume
	for i, m := range cfg.GetMounts() {
		ref := m.GetImage().GetImage()
		if ref == "" {
			continue
		}
		img, err := s.images.Get(ref)
		if err != nil {
			return nil, fmt.Errorf("config.mounts.image: image %q of volume %s: %w", ref, m.GetContainerPath(), err)
		}
		vols = append(vols, lifecycle.ImageVolume{ID: imageVolumeID(containerID, i), Mount: i, ImageID: img.ID, ImageRef: imageRef(img)})
	}
	return vols, nil
}

// mountImageVolumes mounts each image volume read-only and returns, by
// mount index, the host path to bind: the volume's root or its
// image_sub_path, which must be a directory of the image. The mounts are
// under the image store's dir of the container's own rootfs ID, so that
// removing the container (discardContainer) or the start-up sweep
// (sweepOrphans, by rootfsOwner) removes them.
func (s *Server) mountImageVolumes(vols []lifecycle.ImageVolume, cfg *runtime.ContainerConfig) (map[int]string, error) {
	sources := make(map[int]string, len(vols))
	for _, v := range vols {
		if err := s.rootfs.PrepareImageVolume(v.ID, v.ImageID); err != nil {
			return nil, fmt.Errorf("prepare image volume %s: %w", v.ID, err)
		}
		root, err := s.mounts.MountRootfs(v.ID)
		if err != nil {
			return nil, fmt.Errorf("mount image volume %s: %w", v.ID, err)
		}
		m := cfg.GetMounts()[v.Mount]
		source := root
		if sub := m.GetImageSubPath(); sub != "" {
			// Symlinks in the image resolve inside the image.
			if source, err = securejoin.SecureJoin(root, sub); err != nil {
				return nil, fmt.Errorf("image_sub_path %q of image volume %s: %w", sub, m.GetContainerPath(), err)
			}
			if fi, err := os.Stat(source); err != nil || !fi.IsDir() {
				return nil, validate.Invalidf("config.mounts.image_sub_path", "%q is not a directory of image %s", sub, m.GetImage().GetImage())
			}
		}
		sources[v.Mount] = source
	}
	return sources, nil
}

// removeImageVolumes unmounts and removes a container's image volumes,
// which unpins their images.
func (s *Server) removeImageVolumes(vols []lifecycle.ImageVolume) error {
	for _, v := range vols {
		if err := s.rootfs.RemoveRootfs(v.ID); err != nil {
			return fmt.Errorf("remove image volume %s: %w", v.ID, err)
		}
	}
	return nil
}

// checkHandlerMounts refuses a recursive read-only mount on a handler whose
// runtime cannot make one: a plain read-only mount in its place would leave
// the mounts below it writable, without anyone knowing. So too bind mount
// options (noexec, nodev, nosuid) on a handler whose runtime does not list
// them: never a mount without the protection the pod asked for.
func checkHandlerMounts(rt runtimeProbe, handler string, cfg *runtime.ContainerConfig) error {
	for _, m := range cfg.GetMounts() {
		if !m.GetRecursiveReadOnly() && len(m.GetMountOptions()) == 0 {
			continue
		}
		f, err := rt.Features()
		why := func(option string) string {
			if err != nil {
				return err.Error()
			}
			if option == "rro" && f.RecursiveReadOnly {
				return "this kernel cannot (recursiveReadOnly: " + kernelfeat.RecursiveReadOnly.Get().Reason + ")"
			}
			return "its runtime does not list the " + option + " mount option"
		}
		if m.GetRecursiveReadOnly() && !recursiveReadOnly(f) {
			return validate.Invalidf("config.mounts.recursive_read_only", "runtime handler %q cannot make mount %s recursively read-only: %s", handler, m.GetContainerPath(), why("rro"))
		}
		if len(m.GetMountOptions()) > 0 && !f.BindOptions {
			// The options are not echoed: a request may repeat one a million times.
			return validate.Invalidf("config.mounts.mount_options", "runtime handler %q cannot apply bind mount options to mount %s: %s", handler, m.GetContainerPath(), why(strings.Join(oci.BindOptions, ", ")))
		}
	}
	return nil
}
