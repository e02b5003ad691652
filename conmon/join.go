package conmon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/minicri/minicri/conmon/wire"
)

// ErrJoinRefused means a shared monitor took no container: it is gone, or
// it stopped taking containers because its last one exited. Nothing was
// created; start a new monitor instead.
var ErrJoinRefused = errors.New("shared monitor takes no more containers")

// Join has the shared monitor listening in joinDir (see Options.JoinDir)
// create and serve one more container, as Create would with a monitor of
// its own: same options (JoinDir aside), same guarantees. The monitor
// starts a helper for the create, which the deadline kills with the
// runtime's create if it passes. Created.MonitorPID is the shared
// monitor's. The bundle must be complete: Join is BeginJoin and Finish.
func Join(ctx context.Context, joinDir string, o Options) (Created, error) {
	p, err := BeginJoin(ctx, joinDir, o)
	if err != nil {
		return Created{}, err
	}
	return p.Finish()
}

// PendingJoin is a join whose helper starts and prepares the container's
// stdio and sockets while the daemon completes the bundle; its runtime's
// create waits for Finish. Exactly one of Finish and Cancel must follow.
type PendingJoin struct {
	ctx    context.Context
	cancel context.CancelFunc
	stop   func() bool // the deadline's hold on conn
	conn   *net.UnixConn
	cfg    wire.Config
}

// BeginJoin sends the join request to the shared monitor in joinDir (as
// Join, but before the bundle is complete). Only its SocketDir must exist:
// the helper binds its sockets there meanwhile. ctx bounds Finish too.
func BeginJoin(ctx context.Context, joinDir string, o Options) (*PendingJoin, error) {
	o.JoinDir = ""
	cfg, err := o.config()
	if err != nil {
		return nil, fmt.Errorf("monitor options: %w", err)
	}
	ctx, cancel := createContext(ctx)
	conn, err := dial(ctx, joinDir, wire.JoinSocket)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("%w: %w", ErrJoinRefused, err)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	p := &PendingJoin{ctx: ctx, cancel: cancel, stop: stop, conn: conn, cfg: cfg}
	if _, err := conn.Write([]byte(strings.Join(cfg.Args(), "\x00"))); err != nil {
		p.release()
		return nil, fmt.Errorf("%w: %w", ErrJoinRefused, err)
	}
	return p, nil
}

func (p *PendingJoin) release() {
	p.stop()
	p.conn.Close()
	p.cancel()
}

// Finish tells the helper that the bundle is complete and waits for the
// container's create, as Join does.
func (p *PendingJoin) Finish() (Created, error) {
	defer p.release()
	cfg, ctx := p.cfg, p.ctx
	// A write to a monitor that refused the join fails or is never read:
	// the first read below says which.
	p.conn.Write([]byte(wire.GoMessage))
	buf := make([]byte, 1<<16)
	n, err := p.conn.Read(buf)
	if err != nil {
		// Queued when the monitor closed its socket, or refused: no
		// helper ran.
		return Created{}, fmt.Errorf("%w: %w", ErrJoinRefused, contextError(ctx, err))
	}
	helper, err := wire.ParseHelper(buf[:n])
	if err != nil {
		if _, _, ferr := wire.ParseSync(buf[:n]); errors.Is(ferr, ErrCreateFailed) {
			return Created{}, fmt.Errorf("create container %s: %w", cfg.ID, ferr)
		}
		return Created{}, err
	}
	exited := helperExited(helper)
	n, err = p.conn.Read(buf)
	if err == nil {
		var containerPID, monitorPID int
		containerPID, monitorPID, err = wire.ParseSync(buf[:n])
		if err == nil {
			start, serr := startTime(monitorPID)
			if serr == nil {
				return Created{MonitorPID: monitorPID, ContainerPID: containerPID, MonitorStartTime: start}, nil
			}
			err = fmt.Errorf("shared monitor %d: %w", monitorPID, serr)
		}
	} else if errors.Is(err, io.EOF) {
		err = errors.New("join helper exited without a report")
	} else {
		err = contextError(ctx, err)
	}
	abandon(helper, cfg, exited, errors.Is(err, ErrCreateFailed))
	return Created{}, fmt.Errorf("create container %s: %w", cfg.ID, err)
}

// Cancel gives the container up before its create: the helper, told so by
// the connection's end, removes what it made and exits. Cancel returns once
// it has (within cleanupTimeout), so that the caller's own cleanup of the
// socket directory does not race it.
func (p *PendingJoin) Cancel() {
	defer p.release()
	p.conn.CloseWrite()
	p.conn.SetReadDeadline(time.Now().Add(cleanupTimeout))
	buf := make([]byte, 1<<16)
	n, err := p.conn.Read(buf)
	if err != nil {
		return // no helper: the monitor refused the join or closed it
	}
	exited := closedChannel()
	if helper, err := wire.ParseHelper(buf[:n]); err == nil {
		exited = helperExited(helper)
	}
	for {
		if _, err := p.conn.Read(buf); err != nil {
			break
		}
	}
	// The connection ends as the helper's descriptors close, a moment
	// before the helper has exited.
	select {
	case <-exited:
	case <-time.After(cleanupTimeout):
	}
}

// helperExited is closed when the join helper, not the daemon's child, has
// exited; at once when it is gone already.
func helperExited(pid int) <-chan struct{} {
	// A helper gone already has no start time; WatchMonitor then finds
	// no process, or one whose start time is not 0: closed at once.
	start, _ := startTime(pid)
	done, err := WatchMonitor(pid, start)
	if err != nil {
		return closedChannel()
	}
	return done
}
