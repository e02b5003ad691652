package image

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
)

// ProgressLimit is the least a layer download must move: MinRate bytes a
// second on average over every Window of it (image.pull_progress_timeout,
// image.pull_progress_min_rate). containerd cancels a pull only when no byte
// at all arrives in its window, so a registry that sends one byte a minute
// holds a pull forever; a rate does not let it. A zero Window is off.
type ProgressLimit struct {
	Window  time.Duration
	MinRate int64 // bytes a second; 0 means DefaultProgressMinRate
}

// DefaultProgressMinRate is the rate a download must keep when the limit
// names none: 1 KiB a second, 300 KiB over containerd's 5-minute window.
const DefaultProgressMinRate = 1 << 10

func (l ProgressLimit) rate() int64 {
	if l.MinRate <= 0 {
		return DefaultProgressMinRate
	}
	return l.MinRate
}

// minBytes is what one window must bring.
func (l ProgressLimit) minBytes() int64 {
	return max(1, int64(float64(l.rate())*l.Window.Seconds()))
}

// checkEvery is how often downloads are judged: ten times a window, so that
// a stall is caught within 1.1 windows of its start.
func (l ProgressLimit) checkEvery() time.Duration {
	return max(10*time.Millisecond, l.Window/10)
}

// StalledError is a download (a manifest, the image config, a layer, a
// signature payload, a referrers list) that moved less than its
// ProgressLimit asks. It is a registry that cannot
// serve now: ErrUnavailable.
type StalledError struct {
	What         string // "layer", "image config", "manifest", "signature payload", "referrers of"
	Name         string // its digest, or the tag a manifest was asked by
	Bytes, Total int64  // arrived so far, of its size (a manifest's: at most)
	Moved        int64  // in the last window
	Limit        ProgressLimit
}

func (e *StalledError) Error() string {
	of := formatBytes(e.Total)
	if e.What == manifestDownload || e.What == referrersDownload {
		of = "at most " + of
	}
	return fmt.Sprintf("%s %s: download stalled: %s of %s arrived, %s in the last %v; at least %s (%d bytes a second) must arrive in every %v (image.pull_progress_min_rate, image.pull_progress_timeout)",
		e.What, e.Name, formatBytes(e.Bytes), of, formatBytes(e.Moved), e.Limit.Window,
		formatBytes(e.Limit.minBytes()), e.Limit.rate(), e.Limit.Window)
}

// What a pull downloads, as its progress names it.
const (
	layerDownload    = "layer"
	configDownload   = "image config"
	manifestDownload = "manifest"
	// A signature policy's downloads: a registry that stalls on them holds
	// the pull as one that stalls on a layer does.
	payloadDownload   = "signature payload"
	referrersDownload = "referrers of"
)

func (e *StalledError) Unwrap() error { return ErrUnavailable }

// pullProgress watches one pull's downloads (its manifests, config,
// layers, and the signatures and referrers its policy asks for), from the request until the last byte is in (never a layer's
// unpacking, nor the wait for a download slot): it logs each layer when it
// is in (size, time, rate) and every Hooks.ProgressInterval the downloads still
// coming, and calls stalled with a *StalledError when one moves less than
// the limit asks. All methods accept a nil receiver (no logging, no limit).
type pullProgress struct {
	log     logrus.FieldLogger
	limit   ProgressLimit
	stalled func(error)
	mu      sync.Mutex
	busy    map[*layerProgress]bool
	done    chan struct{}
}

type layerProgress struct {
	what  string // layerDownload, configDownload, manifestDownload …
	name  string // digest, or a manifest's tag
	total int64
	start time.Time
	bytes atomic.Int64
	// A streamed download is read at the pace of its unpack: it is
	// judged only for the time it waited for the network (reading: when
	// the read under way began; waited: the reads before it).
	isStreamed      atomic.Bool
	reading, waited atomic.Int64 // unix nanoseconds; nanoseconds
	// samples are the byte counts seen by the checks of the last window
	// and the newest one before it (under pullProgress.mu).
	samples []progressSample
}

type progressSample struct {
	at     time.Time
	bytes  int64
	waited time.Duration // a streamed download's time in reads, up to at
}

// streamed marks a download read at the pace of its unpack. Call before
// the first read.
func (l *layerProgress) streamed() {
	if l != nil {
		l.isStreamed.Store(true)
	}
}

// startRead and endRead bracket a read of a streamed download.
func (l *layerProgress) startRead() {
	if l != nil {
		l.reading.Store(time.Now().UnixNano())
	}
}

func (l *layerProgress) endRead() {
	if l != nil {
		l.waited.Add(time.Now().UnixNano() - l.reading.Swap(0))
	}
}

// waitedAt is the time a streamed download spent in reads up to now.
func (l *layerProgress) waitedAt(now time.Time) time.Duration {
	w := l.waited.Load()
	if since := l.reading.Load(); since != 0 {
		w += max(0, now.UnixNano()-since)
	}
	return time.Duration(w)
}

func (l *layerProgress) Write(p []byte) (int, error) {
	l.bytes.Add(int64(len(p)))
	return len(p), nil
}

// newPullProgress starts watching, logging every interval; stalled is
// called at most once.
func newPullProgress(log logrus.FieldLogger, limit ProgressLimit, interval time.Duration, stalled func(error)) *pullProgress {
	p := &pullProgress{log: log, limit: limit, stalled: stalled, busy: map[*layerProgress]bool{}, done: make(chan struct{})}
	go p.run(interval)
	return p
}

// stop ends the periodic logging and checks.
func (p *pullProgress) stop() {
	if p != nil {
		close(p.done)
	}
}

func (p *pullProgress) run(interval time.Duration) {
	logs := time.NewTicker(interval)
	defer logs.Stop()
	var checks <-chan time.Time
	if p.limit.Window > 0 {
		t := time.NewTicker(p.limit.checkEvery())
		defer t.Stop()
		checks = t.C
	}
	for {
		select {
		case <-p.done:
			return
		case <-logs.C:
			p.logBusy()
		case now := <-checks:
			if err := p.checkStalls(now); err != nil {
				p.stalled(err)
				return
			}
		}
	}
}

// checkStalls judges every download in progress; the first that stalled
// is the answer.
func (p *pullProgress) checkStalls(now time.Time) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.busy {
		if err := l.judge(now, p.limit); err != nil {
			return err
		}
	}
	return nil
}

// judge records what the download has at now and compares it with what it
// had a window ago. A download younger than a window, or whose bytes are
// all in (it is being stored), is not judged.
func (l *layerProgress) judge(now time.Time, limit ProgressLimit) error {
	n := l.bytes.Load()
	l.samples = append(l.samples, progressSample{now, n, l.waitedAt(now)})
	cut := now.Add(-limit.Window)
	i := 0
	for i+1 < len(l.samples) && !l.samples[i+1].at.After(cut) {
		i++
	}
	l.samples = l.samples[i:]
	if l.samples[0].at.After(cut) || n >= l.total {
		return nil
	}
	// A streamed download that waited for its unpack more than for the
	// network in the window: the unpack is slow, not the registry.
	if l.isStreamed.Load() && l.samples[len(l.samples)-1].waited-l.samples[0].waited < limit.Window/2 {
		return nil
	}
	if moved := n - l.samples[0].bytes; moved < limit.minBytes() {
		return &StalledError{What: l.what, Name: l.name, Bytes: n, Total: l.total, Moved: moved, Limit: limit}
	}
	return nil
}

func (p *pullProgress) logBusy() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.busy {
		n := l.bytes.Load()
		p.log.WithFields(logrus.Fields{
			l.what:  l.name,
			"bytes": fmt.Sprintf("%s / %s", formatBytes(n), formatBytes(l.total)),
			"rate":  formatRate(n, time.Since(l.start)),
		}).Info("pulling " + l.what)
	}
}

// begin watches the download of what (a layerDownload …) named name, of
// total bytes (a manifest's: at most).
func (p *pullProgress) begin(what, name string, total int64) *layerProgress {
	if p == nil {
		return nil
	}
	now := time.Now()
	l := &layerProgress{what: what, name: name, total: total, start: now, samples: []progressSample{{now, 0, 0}}}
	p.mu.Lock()
	p.busy[l] = true
	p.mu.Unlock()
	return l
}

func (p *pullProgress) end(l *layerProgress, err error) {
	if p == nil || l == nil {
		return
	}
	p.mu.Lock()
	delete(p.busy, l)
	p.mu.Unlock()
	if err != nil || l.what != layerDownload {
		return // the pull's error says it; a layer's log is enough
	}
	elapsed := time.Since(l.start)
	p.log.WithFields(logrus.Fields{
		"layer":    l.name,
		"bytes":    formatBytes(l.bytes.Load()),
		"duration": elapsed.Round(time.Millisecond).String(),
		"rate":     formatRate(l.bytes.Load(), elapsed),
	}).Info("layer downloaded")
}

func formatBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%d B", n)
	}
}

func formatRate(n int64, d time.Duration) string {
	if d <= 0 {
		d = time.Millisecond
	}
	return formatBytes(int64(float64(n)/d.Seconds())) + "/s"
}
