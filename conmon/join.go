package conmon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
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
// monitor's.
func Join(ctx context.Context, joinDir string, o Options) (Created, error) {
	o.JoinDir = ""
	cfg, err := o.config()
	if err != nil {
		return Created{}, fmt.Errorf("monitor options: %w", err)
	}
	ctx, cancel := createContext(ctx)
	defer cancel()
	conn, err := dial(ctx, joinDir, wire.JoinSocket)
	if err != nil {
		return Created{}, fmt.Errorf("%w: %w", ErrJoinRefused, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := conn.Write([]byte(strings.Join(cfg.Args(), "\x00"))); err != nil {
		return Created{}, fmt.Errorf("%w: %w", ErrJoinRefused, err)
	}
	buf := make([]byte, 1<<16)
	n, err := conn.Read(buf)
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
	n, err = conn.Read(buf)
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

// WatchContainer returns a channel that is closed when the monitor is done
// with the container: its exit file is written and its sockets are gone,
// or the monitor died. It holds one connection to the monitor's control
// socket, which the monitor closes then; a container already done gives a
// channel closed at once.
func WatchContainer(socketDir string) (<-chan struct{}, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := dial(ctx, socketDir, wire.ControlSocket)
	if errors.Is(err, ErrNotRunning) || errors.Is(err, os.ErrNotExist) {
		return closedChannel(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("watch container: %w", err)
	}
	if _, err := conn.Write([]byte(wire.RequestWait)); err != nil {
		conn.Close()
		return closedChannel(), nil // the monitor closed the socket meanwhile: done
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer conn.Close()
		var b [64]byte
		for {
			if _, err := conn.Read(b[:]); err != nil {
				return
			}
		}
	}()
	return done, nil
}
