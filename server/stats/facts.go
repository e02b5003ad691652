package stats

import (
	"bytes"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/oci"
	"github.com/minicri/minicri/server/internal/lifecycle"
)

// The kernel's defaults, which a container whose config sets none has: the
// CFS period (cpu.cfs_period_us) and the CPU shares of cgroup v1.
const (
	defaultCPUPeriod = 100_000
	defaultCPUShares = 1024
)

// containerFacts are figures of a container that stay as they are while its
// record does: read once, not on every scrape of a periodic call made on
// every node.
type containerFacts struct {
	config []byte // the record's config they were read from
	// cpuPeriod and cpuShares are the config's (UpdateContainerResources
	// records what it applies there), else the kernel's defaults. 0: not
	// read.
	cpuPeriod, cpuShares uint64
	// fsDevice names the device of the filesystem of the writable layer at
	// fsMountpoint.
	fsMountpoint, fsDevice string
}

// factCache holds the facts of the containers the last metrics call saw.
type factCache struct {
	mu    sync.Mutex
	facts map[string]*containerFacts
}

var containerFactsCache = &factCache{facts: map[string]*containerFacts{}}

// get returns rec's facts, read again only when its config changed, with
// the device of the filesystem at mountpoint ("" for none) once known.
func (c *factCache) get(rec lifecycle.ContainerRecord, mountpoint string) (containerFacts, error) {
	c.mu.Lock()
	f := c.facts[rec.ID]
	c.mu.Unlock()
	if f == nil || !bytes.Equal(f.config, rec.Config) {
		cfg, err := rec.DecodeConfig()
		if err != nil {
			return containerFacts{}, err
		}
		r := cfg.GetLinux().GetResources()
		f = &containerFacts{config: rec.Config, cpuPeriod: defaultCPUPeriod, cpuShares: defaultCPUShares}
		if r.GetCpuPeriod() > 0 {
			f.cpuPeriod = uint64(r.GetCpuPeriod())
		}
		if r.GetCpuShares() > 0 {
			f.cpuShares = uint64(r.GetCpuShares())
		}
	}
	if mountpoint != "" && mountpoint != f.fsMountpoint {
		var st unix.Stat_t
		if err := unix.Stat(mountpoint, &st); err != nil {
			return containerFacts{}, fmt.Errorf("stat writable layer %s: %w", mountpoint, err)
		}
		f = &containerFacts{config: f.config, cpuPeriod: f.cpuPeriod, cpuShares: f.cpuShares,
			fsMountpoint: mountpoint, fsDevice: oci.BlockDeviceName(uint64(unix.Major(st.Dev)), uint64(unix.Minor(st.Dev)))}
	}
	c.mu.Lock()
	c.facts[rec.ID] = f
	c.mu.Unlock()
	return *f, nil
}

// keepOnly forgets the facts of the containers not in ids: removed ones.
func (c *factCache) keepOnly(ids map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.facts {
		if !ids[id] {
			delete(c.facts, id)
		}
	}
}

// fsFigures are the size and inodes of the filesystem of a container's
// writable layer, as cAdvisor reports them beside its usage.
type fsFigures struct {
	device                    string
	limit, inodes, inodesFree uint64
}

// filesystem reads the figures of the filesystem of the writable layer at
// mountpoint: they change as the node's disk fills, so on every call.
func (f containerFacts) filesystem(mountpoint string) (*fsFigures, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(mountpoint, &st); err != nil {
		return nil, fmt.Errorf("statfs writable layer %s: %w", mountpoint, err)
	}
	return &fsFigures{
		device:     f.fsDevice,
		limit:      st.Blocks * uint64(st.Bsize),
		inodes:     st.Files,
		inodesFree: st.Ffree,
	}, nil
}
