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
	// RuncVersion is the runtime's runc version, from the features'
	// org.opencontainers.runc.version annotation (runc 1.1 and later) or,
	// for a runc without `features`, from `runc --version`; "" for another
	// runtime, or a runc that does not say.
	RuncVersion string
	// BindOptions: the runtime takes every option of BindOptions on a
	// bind mount (runc and crun apply them in the remount of the bind).
	BindOptions bool
}

// MissingFixes lists the runc security fixes (MissingRuncFixes) that the
// runtime lacks, by its RuncVersion; none when that is unknown.
func (f Features) MissingFixes() []string {
	missing, _ := MissingRuncFixes(f.RuncVersion)
	return missing
}

// HasFixes: the runtime is a runc whose version has every fix.
func (f Features) HasFixes() bool {
	missing, known := MissingRuncFixes(f.RuncVersion)
	return known && len(missing) == 0
}

// featuresTimeout bounds one `features` run: a hung binary must not hang
// start-up.
const featuresTimeout = 10 * time.Second

// Features runs the runtime's `features` subcommand once and keeps the
// answer, in memory and in FeaturesCache for the next start. A runtime without the subcommand (or whose binary is missing) has
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
	if r.FeaturesCache == "" {
		return runFeatures(path)
	}
	// The binary's identity is taken before it runs: one replaced meanwhile
	// is probed again at the next start.
	key, err := binaryKey(path)
	if err != nil {
		return runFeatures(path)
	}
	if f, ok := cachedFeaturesOf(r.FeaturesCache, key); ok {
		return f, nil
	}
	f, err := runFeatures(path)
	if err == nil {
		_ = keepFeatures(r.FeaturesCache, key, f)
	}
	return f, err
}

// runFeatures runs the binary at path for its features.
func runFeatures(path string) (Features, error) {
	ctx, cancel := context.WithTimeout(context.Background(), featuresTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "features")
	cmd.Env = runtimeEnv()
	out, err := cmd.Output()
	if err != nil {
		// runc before 1.1 has no `features`, nor the fixes; its version
		// says which it is.
		f := Features{}
		if out, verr := exec.CommandContext(ctx, path, "--version").Output(); verr == nil {
			f.RuncVersion = runcVersionLine(out)
		}
		return f, fmt.Errorf("%s features: %w", path, err)
	}
	return parseFeatures(out)
}

// runtimeFeatures is the part of the runtime-spec features document that
// minicri reads.
type runtimeFeatures struct {
	MountOptions []string          `json:"mountOptions"`
	Annotations  map[string]string `json:"annotations"`
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
		RuncVersion:       doc.Annotations["org.opencontainers.runc.version"],
		BindOptions:       listsAll(doc.MountOptions, BindOptions),
	}, nil
}

func listsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}
