package oci

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"time"
)

// Features is what a handler's OCI runtime says it can do, from its
// `features` subcommand (runtime-spec features.md). The kubelet turns on
// recursive read-only mounts and user namespaces per handler from what
// Status reports, so a feature is claimed only when the runtime lists it.
type Features struct {
	// RecursiveReadOnly: the runtime accepts the "rro" mount option
	// (mount_setattr with MOUNT_ATTR_RDONLY and AT_RECURSIVE).
	RecursiveReadOnly bool
	// IDMappedMounts: the runtime can idmap a mount into the container's
	// user namespace (mountExtensions.idmap.enabled).
	IDMappedMounts bool
}

// featuresTimeout bounds one `features` run: a hung binary must not hang
// start-up.
const featuresTimeout = 10 * time.Second

// Features runs the runtime's `features` subcommand once and keeps the
// answer. A runtime without the subcommand (or whose binary is missing) has
// no features; the error says why, for the log.
func (r *Runtime) Features() (Features, error) {
	r.featuresOnce.Do(func() { r.features, r.featuresErr = r.probeFeatures() })
	return r.features, r.featuresErr
}

func (r *Runtime) probeFeatures() (Features, error) {
	path, err := r.lookPath()
	if err != nil {
		return Features{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), featuresTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "features")
	cmd.Env = runtimeEnv()
	out, err := cmd.Output()
	if err != nil {
		return Features{}, fmt.Errorf("%s features: %w", path, err)
	}
	return parseFeatures(out)
}

// runtimeFeatures is the part of the runtime-spec features document that
// minicri reads.
type runtimeFeatures struct {
	MountOptions []string `json:"mountOptions"`
	Linux        struct {
		MountExtensions struct {
			IDMap struct {
				Enabled *bool `json:"enabled"`
			} `json:"idmap"`
		} `json:"mountExtensions"`
	} `json:"linux"`
}

func parseFeatures(data []byte) (Features, error) {
	var doc runtimeFeatures
	if err := json.Unmarshal(data, &doc); err != nil {
		return Features{}, fmt.Errorf("parse runtime features: %w", err)
	}
	idmap := doc.Linux.MountExtensions.IDMap.Enabled
	return Features{
		RecursiveReadOnly: slices.Contains(doc.MountOptions, "rro"),
		IDMappedMounts:    idmap != nil && *idmap,
	}, nil
}
