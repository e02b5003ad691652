package server

import (
	"context"
	"io/fs"
	"path/filepath"
	"syscall"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ImageFsInfo reports the filesystem that holds images. The kubelet calls it
// on connect and for image garbage collection.
func (s *Server) ImageFsInfo(ctx context.Context, req *runtime.ImageFsInfoRequest) (*runtime.ImageFsInfoResponse, error) {
	dir := filepath.Join(s.cfg.Root, "image")
	var bytes, inodes uint64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		inodes++
		if info, err := d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				bytes += uint64(st.Blocks) * 512
			}
		}
		return nil
	})
	usage := &runtime.FilesystemUsage{
		Timestamp:  time.Now().UnixNano(),
		FsId:       &runtime.FilesystemIdentifier{Mountpoint: dir},
		UsedBytes:  &runtime.UInt64Value{Value: bytes},
		InodesUsed: &runtime.UInt64Value{Value: inodes},
	}
	return &runtime.ImageFsInfoResponse{ImageFilesystems: []*runtime.FilesystemUsage{usage}}, nil
}
