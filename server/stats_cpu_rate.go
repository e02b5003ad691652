package server

import (
	"sync"
	"time"
)

// cpuRates keeps the last CPU sample of each container and pod, so that
// stats can report usage_nano_cores: the rate between two calls, as
// containerd does. The kubelet computes its own rate only when the runtime
// sends none, from its own cache; the runtime's is the one shared by every
// client (kubelet, crictl stats, metrics). The zero value is ready to use.
type cpuRates struct {
	mu      sync.Mutex
	samples map[string]cpuSample
}

type cpuSample struct {
	at    int64  // unix nanoseconds
	usage uint64 // cumulative CPU nanoseconds
	rate  uint64 // nano cores over the window that ended at this sample
	ok    bool   // rate is set: this sample had a predecessor
}

const (
	// minRateWindow is the shortest window a rate is computed over: two
	// calls closer than this (the kubelet's summary and metrics scrapes
	// often coincide) get the last rate, not a noisy one.
	minRateWindow = int64(100 * time.Millisecond)
	// maxCPUSamples bounds the cache; removal forgets entries, and those of
	// what was never removed (a daemon killed mid-removal) age out.
	maxCPUSamples = 16384
	staleSample   = int64(10 * time.Minute)
)

// nanoCores records a sample of id's cumulative CPU time and returns the
// rate since the previous one; false on the first sample (the CRI then
// leaves usage_nano_cores unset and the kubelet fills it in on its next
// call) and after the counter went backwards (a cgroup made anew).
func (r *cpuRates) nanoCores(id string, at int64, usage uint64) (uint64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.samples == nil {
		r.samples = map[string]cpuSample{}
	}
	prev, seen := r.samples[id]
	switch {
	case seen && at-prev.at < minRateWindow && usage >= prev.usage:
		return prev.rate, prev.ok
	case seen && usage >= prev.usage && at > prev.at:
		s := cpuSample{at: at, usage: usage, ok: true,
			rate: uint64(float64(usage-prev.usage) / float64(at-prev.at) * float64(time.Second))}
		r.samples[id] = s
		return s.rate, true
	}
	if !seen && len(r.samples) >= maxCPUSamples {
		r.pruneLocked(at)
		if len(r.samples) >= maxCPUSamples {
			return 0, false
		}
	}
	r.samples[id] = cpuSample{at: at, usage: usage}
	return 0, false
}

// lastUsage is the cumulative CPU time of id's last sample.
func (r *cpuRates) lastUsage(id string) (uint64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.samples[id]
	return s.usage, ok
}

// forget drops id's sample: the container or pod is removed.
func (r *cpuRates) forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.samples, id)
}

func (r *cpuRates) pruneLocked(now int64) {
	for id, s := range r.samples {
		if now-s.at > staleSample {
			delete(r.samples, id)
		}
	}
}
