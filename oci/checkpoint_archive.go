package oci

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	metadata "github.com/checkpoint-restore/checkpointctl/lib"
	"github.com/minicri/minicri/internal/atomicfile"
	"github.com/minicri/minicri/internal/fstree"
	"github.com/minicri/minicri/internal/tarfile"
)

// A container checkpoint archive is a tar in the layout containerd and
// cri-o write and checkpointctl (whose lib names the files) reads:
//
//	checkpoint/       CRIU's images (runc checkpoint --image-path)
//	dump.log          CRIU's log of the dump
//	stats-dump        CRIU's statistics of the dump
//	config.dump       metadata.ContainerConfig: ID, name, image, runtime, times
//	spec.dump         the container's OCI spec
//	status.dump       the CRI ContainerStatus, as containerd writes it
//	rootfs-diff.tar   what the container wrote in its root filesystem
//	deleted.files     what it deleted there (JSON list), when anything
//	container.log     the container's CRI log, when it has one
//
// It is staged in a directory of the daemon's own (all but container.log)
// and written to its location as one file.
const (
	CheckpointImagesDir  = metadata.CheckpointDirectory
	CheckpointDumpLog    = metadata.DumpLogFile
	CheckpointConfigDump = metadata.ConfigDumpFile
	CheckpointSpecDump   = metadata.SpecDumpFile
	CheckpointStatusDump = metadata.StatusDumpFile
	CheckpointRootfsDiff = metadata.RootFsDiffTar
	CheckpointDeleted    = metadata.DeletedFilesFile
	CheckpointLog        = "container.log"
)

// CheckpointConfig is config.dump.
type CheckpointConfig = metadata.ContainerConfig

// WriteCheckpointFiles writes config.dump, spec.dump, status.dump and, when
// anything was deleted, deleted.files into the stage dir.
func WriteCheckpointFiles(stageDir string, cfg CheckpointConfig, spec any, status any, deleted []string) error {
	files := map[string]any{CheckpointConfigDump: cfg, CheckpointSpecDump: spec, CheckpointStatusDump: status}
	if len(deleted) > 0 {
		files[CheckpointDeleted] = deleted
	}
	for name, v := range files {
		data, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("encode %s: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(stageDir, name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// ErrCheckpointTooLarge: a checkpoint's archive, or its rootfs diff, would
// pass its bound (runtime.checkpoint_max_bytes).
var ErrCheckpointTooLarge = errors.New("checkpoint larger than runtime.checkpoint_max_bytes")

// BoundWriter is w failing with ErrCheckpointTooLarge, having written
// nothing of the write, at the first write that would take it past max
// bytes.
func BoundWriter(w io.Writer, max int64) io.Writer { return &boundWriter{w: w, left: max, max: max} }

type boundWriter struct {
	w         io.Writer
	left, max int64
}

func (b *boundWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > b.left {
		return 0, fmt.Errorf("%w (%d bytes)", ErrCheckpointTooLarge, b.max)
	}
	n, err := b.w.Write(p)
	b.left -= int64(n)
	return n, err
}

// WriteCheckpointArchive writes the archive at location from the stage
// dir and, when logPath is not "", the container's log. The archive is
// 0600 (it holds every memory page of the container's processes) and
// appears whole or not at all: one that would pass maxBytes fails with
// ErrCheckpointTooLarge, leaving nothing at location. The end of ctx stops
// it between two files.
func WriteCheckpointArchive(ctx context.Context, location, stageDir, logPath string, maxBytes int64) error {
	return atomicfile.WriteStream(location, 0o600, func(w io.Writer) error {
		tw := tarfile.NewWriter(BoundWriter(w, maxBytes))
		if err := addTree(ctx, tw, stageDir); err != nil {
			return err
		}
		if logPath != "" {
			if err := addFile(tw, logPath, CheckpointLog); err != nil && !os.IsNotExist(err) {
				return fmt.Errorf("container log: %w", err)
			}
		}
		return tw.Close()
	})
}

// addTree adds the entries below dir, named relative to it. The stage dir
// holds what CRIU and the daemon wrote: directories and regular files; it
// is read through internal/fstree, which follows no link.
func addTree(ctx context.Context, tw *tarfile.Writer, dir string) error {
	root, err := fstree.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	return root.Walk("", func(e *fstree.Entry) error {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("write the archive: %w", err)
		}
		switch fi := e.Info(); {
		case fi.IsDir():
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: e.Rel + "/", Mode: 0o700})
		case fi.Mode().IsRegular():
			f, err := e.Open()
			if err != nil {
				return err
			}
			defer f.Close()
			return tw.AddFile(f, &tar.Header{Typeflag: tar.TypeReg, Name: e.Rel, Mode: 0o600})
		default:
			return fmt.Errorf("stage entry %s: not a regular file or directory", e.Rel)
		}
	})
}

// addFile adds the regular file at path as name.
func addFile(tw *tarfile.Writer, path, name string) error {
	return tw.AddRegular(path, &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o600}, nil)
}
