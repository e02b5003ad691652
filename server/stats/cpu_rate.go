package stats

import (
	"time"
)

// CPUSample is the last CPU sample of a container or a pod, kept in its
// object, so that stats can report usage_nano_cores: the rate between two
// calls, as containerd does. The kubelet computes its own rate only when
// the runtime sends none, from its own cache; the runtime's is the one
// shared by every client (kubelet, crictl stats, metrics). It goes with its
// object: nothing of a removed container or pod stays.
type CPUSample struct {
	at    int64  // unix nanoseconds
	usage uint64 // cumulative CPU nanoseconds
	rate  uint64 // nano cores over the window that ended at this sample
	ok    bool   // rate is set: this sample had a predecessor
	seen  bool   // a sample was taken
}

// minRateWindow is the shortest window a rate is computed over: two calls
// closer than this (the kubelet's summary and metrics scrapes often
// coincide) get the last rate, not a noisy one.
const minRateWindow = int64(100 * time.Millisecond)

// Next records a sample of the cumulative CPU time and returns the rate
// since the previous one; false on the first sample (the CRI then leaves
// usage_nano_cores unset and the kubelet fills it in on its next call) and
// after the counter went backwards (a cgroup made anew).
func (p *CPUSample) Next(at int64, usage uint64) (uint64, bool) {
	prev := *p
	switch {
	case prev.seen && at-prev.at < minRateWindow && usage >= prev.usage:
		return prev.rate, prev.ok
	case prev.seen && usage >= prev.usage && at > prev.at:
		*p = CPUSample{at: at, usage: usage, ok: true, seen: true,
			rate: uint64(float64(usage-prev.usage) / float64(at-prev.at) * float64(time.Second))}
		return p.rate, true
	}
	*p = CPUSample{at: at, usage: usage, seen: true}
	return 0, false
}

// Last is the cumulative CPU time of the last sample, and whether there
// was one.
func (p *CPUSample) Last() (uint64, bool) { return p.usage, p.seen }
