package server

import (
	"context"
	"time"

	"github.com/minicri/minicri/image"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// diskUsage is what ImageFsInfo and the container stats read of the image
// store's disk (*image.Store).
type diskUsage interface {
	FsInfo() (image.FsUsage, error)
	RootfsUsage(id string) (image.FsUsage, error)
}

// ImageFsInfo reports the filesystem that holds images and what they use of
// it. The kubelet calls it on connect and for image garbage collection.
func (s *Server) ImageFsInfo(ctx context.Context, req *runtime.ImageFsInfoRequest) (*runtime.ImageFsInfoResponse, error) {
	u, err := s.usage.FsInfo()
	if err != nil {
		return nil, toStatus(err)
	}
	usage := &runtime.FilesystemUsage{
		Timestamp:  time.Now().UnixNano(),
		FsId:       &runtime.FilesystemIdentifier{Mountpoint: u.Mountpoint},
		UsedBytes:  &runtime.UInt64Value{Value: u.UsedBytes},
		InodesUsed: &runtime.UInt64Value{Value: u.InodesUsed},
	}
	return &runtime.ImageFsInfoResponse{ImageFilesystems: []*runtime.FilesystemUsage{usage}}, nil
}
