package monitor

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/conmon/wire"
)

// orphanReapInterval is how often a monitor with a container in its own
// PID namespace reaps the orphans that container leaves: no fd tells of
// them.
const orphanReapInterval = 10 * time.Second

// pool is the monitor process: one epoll loop over the descriptors of every
// container it serves, and, when the daemon shares it, over its join socket
// and the helpers that create further containers (join.go). Containers
// share the loop's buffer; a container adds descriptors and a few small
// structs, not another Go runtime.
type pool struct {
	epfd     int
	tags     *epollTags
	buf      []byte
	iov      [maxIovecs]unix.Iovec // the log writers' scratch space
	events   [16]unix.EpollEvent
	monitors []*monitor

	joinDir   string
	joinFD    int // the listening join socket, -1 when not shared (any more)
	helpers   []*helper
	joins     int
	reapUntil int64 // unix nanoseconds: reap orphans now and then until then
}

func newPool() (*pool, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, errors.New("epoll: " + err.Error())
	}
	return &pool{epfd: epfd, tags: &epollTags{tags: map[int]int32{}}, buf: make([]byte, 1+wire.MaxPayload), joinFD: -1}, nil
}

// epollTags tells stale events from live ones. One wake-up reads a batch
// of events; handling one may close a descriptor and open another with the
// same number (an accepted connection, a received descriptor), and a later
// event of the batch, meant for the closed one, would reach the new one. So
// every registration carries a tag of its own in the event's data, and an
// event whose tag is not the descriptor's current one is skipped.
type epollTags struct {
	next int32
	tags map[int]int32
}

// ctl is epoll_ctl with the tag: a new one for an add, the current one for
// a change.
func (t *epollTags) ctl(epfd, op, fd int, events uint32) error {
	if op == unix.EPOLL_CTL_ADD {
		t.next++
		t.tags[fd] = t.next
	}
	ev := unix.EpollEvent{Events: events, Fd: int32(fd), Pad: t.tags[fd]}
	if err := unix.EpollCtl(epfd, op, fd, &ev); err != nil {
		return errors.New("epoll_ctl: " + err.Error())
	}
	return nil
}

func (t *epollTags) current(ev unix.EpollEvent) bool {
	return t.tags[int(ev.Fd)] == ev.Pad
}

// add starts serving a created container and reports it to the daemon.
func (p *pool) add(m *monitor) error {
	m.epfd, m.tags, m.buf = p.epfd, p.tags, p.buf
	m.log.iov = &p.iov
	if err := m.watch(); err != nil {
		return err
	}
	Report(m.syncFD, wire.CreatedMessage(m.containerPID, unix.Getpid()))
	unix.Close(m.syncFD)
	m.syncFD = -1
	p.monitors = append(p.monitors, m)
	return nil
}

// serve runs until every container has exited and been finished, and no
// join is under way.
func (p *pool) serve() {
	for len(p.monitors) > 0 || len(p.helpers) > 0 {
		if len(p.monitors) == 0 {
			// Nothing left to serve: no more joins. A daemon whose
			// connection is still queued sees it refused and starts a
			// new monitor.
			p.closeJoin()
		}
		n, err := unix.EpollWait(p.epfd, p.events[:], p.waitMillis())
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return
		}
		if n == 0 {
			p.reapOrphans()
		}
		for _, ev := range p.events[:n] {
			if p.tags.current(ev) {
				p.handle(int(ev.Fd), ev.Events)
			}
		}
		p.finishDone()
	}
	p.closeJoin()
}

func (p *pool) handle(fd int, events uint32) {
	if fd == p.joinFD {
		p.acceptJoin()
		return
	}
	for _, h := range p.helpers {
		if fd == h.pidFD || fd == h.handoverFD {
			p.serveHelper(h, fd)
			return
		}
	}
	for _, m := range p.monitors {
		if m.owns(fd) {
			running := m.exit == nil
			m.handle(fd, events)
			if running && m.exit != nil {
				// The end of a container whose processes live in the
				// monitor's PID namespace may leave orphans behind.
				p.reapOrphans()
			}
			return
		}
	}
}

// finishDone finishes every container whose output is drained.
func (p *pool) finishDone() {
	kept := p.monitors[:0]
	for _, m := range p.monitors {
		if m.done() {
			m.finish()
			continue
		}
		kept = append(kept, m)
	}
	clear(p.monitors[len(kept):])
	p.monitors = kept
}

// waitMillis is the shortest wait any container allows.
func (p *pool) waitMillis() int {
	wait := -1
	if time.Now().UnixNano() < p.reapUntil {
		wait = int(orphanPoll / time.Millisecond)
	}
	for _, m := range p.monitors {
		w := m.waitMillis()
		if m.exit == nil && m.sharedPIDNS {
			w = int(orphanReapInterval / time.Millisecond)
		}
		if w >= 0 && (wait < 0 || w < wait) {
			wait = w
		}
	}
	return wait
}

// reapOrphans reaps the children that are no container's init: the orphans
// a container in the host's PID namespace left to the monitor, the child
// subreaper. An init found here is handed to its container. While a join
// helper runs it is skipped: the init it creates becomes the monitor's
// child before the helper hands the container over, and its exit status
// must not be taken before then.
func (p *pool) reapOrphans() {
	if len(p.helpers) > 0 {
		return
	}
	reapChildren(func(pid int, status unix.WaitStatus) {
		for _, m := range p.monitors {
			if m.containerPID == pid && m.exit == nil {
				m.containerExited(status)
			}
		}
	})
}
