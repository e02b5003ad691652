package image

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/sirupsen/logrus"
)

// progressInterval is how often a pull logs the layers still downloading.
var progressInterval = 5 * time.Second

// pullProgress logs one pull's downloads at info level: each layer when it
// is in (size, time, rate), and every progressInterval the layers still
// coming. All methods accept a nil receiver (no logging).
type pullProgress struct {
	log  logrus.FieldLogger
	mu   sync.Mutex
	busy map[*layerProgress]bool
	done chan struct{}
}

type layerProgress struct {
	digest string
	total  int64
	start  time.Time
	bytes  atomic.Int64
}

func (l *layerProgress) Write(p []byte) (int, error) {
	l.bytes.Add(int64(len(p)))
	return len(p), nil
}

func newPullProgress(log logrus.FieldLogger) *pullProgress {
	p := &pullProgress{log: log, busy: map[*layerProgress]bool{}, done: make(chan struct{})}
	// Read here, not in the goroutine: one that starts late, after its
	// pull ended, must not read the setting while a test changes it.
	go p.tick(progressInterval)
	return p
}

// stop ends the periodic logging.
func (p *pullProgress) stop() {
	if p != nil {
		close(p.done)
	}
}

func (p *pullProgress) tick(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-p.done:
			return
		case <-t.C:
			p.logBusy()
		}
	}
}

func (p *pullProgress) logBusy() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.busy {
		n := l.bytes.Load()
		p.log.WithFields(logrus.Fields{
			"layer": l.digest,
			"bytes": fmt.Sprintf("%s / %s", formatBytes(n), formatBytes(l.total)),
			"rate":  formatRate(n, time.Since(l.start)),
		}).Info("pulling layer")
	}
}

func (p *pullProgress) begin(desc v1.Descriptor) *layerProgress {
	if p == nil {
		return nil
	}
	l := &layerProgress{digest: desc.Digest.String(), total: desc.Size, start: time.Now()}
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
	if err != nil {
		return // the pull's error says it
	}
	elapsed := time.Since(l.start)
	p.log.WithFields(logrus.Fields{
		"layer":    l.digest,
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
