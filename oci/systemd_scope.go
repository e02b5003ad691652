package oci

import (
	"context"
	"errors"
	"fmt"
	"sync"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// SystemdScopes moves processes of minicri's own (the pods' infra
// processes, the monitors) out of the daemon's unit into transient scopes,
// under the systemd cgroup driver: left in minicri.service's cgroup they
// would count against the daemon's limits, be signalled by a `systemctl
// kill minicri`, and be missing from the pod's slice (cri-o does the same
// with conmon, crio-conmon-<id>.scope). It talks to systemd on its private
// socket (root only, no D-Bus daemon needed), as runc does, over one
// connection made at first use and again after it broke.
type SystemdScopes struct {
	mu   sync.Mutex
	conn *sddbus.Conn
}

// MoveToScope starts the transient scope unit (a "<name>.scope") in slice
// with pid as its only process, and waits until systemd has made it. The
// scope goes when its last process exits; StopScope makes sure of it.
func (s *SystemdScopes) MoveToScope(ctx context.Context, pid int, unit, slice, description string) error {
	props := []sddbus.Property{
		sddbus.PropSlice(slice),
		sddbus.PropPids(uint32(pid)),
		sddbus.PropDescription(description),
		// Nothing ordered against the scope: it is stopped with its
		// process, or with its slice.
		{Name: "DefaultDependencies", Value: dbus.MakeVariant(false)},
		// A failed scope (its process killed) is not kept around.
		{Name: "CollectMode", Value: dbus.MakeVariant("inactive-or-failed")},
	}
	err := s.job(ctx, func(conn *sddbus.Conn, done chan<- string) error {
		_, err := conn.StartTransientUnitContext(ctx, unit, "fail", props, done)
		return err
	})
	if err != nil {
		return fmt.Errorf("start scope %s in %s: %w", unit, slice, err)
	}
	return nil
}

// StopScope stops a scope whose processes minicri has ended, and waits
// until systemd is done with it; a scope systemd no longer has is no error.
// A scope goes by itself when systemd sees its cgroup run empty, but
// systemd before 249 misses that when the last process exits while it
// reloads (systemctl daemon-reload): the scope then stays "active
// (running)" with an empty cgroup until the next boot. runc stops its
// containers' scopes the same way.
func (s *SystemdScopes) StopScope(ctx context.Context, unit string) error {
	err := s.job(ctx, func(conn *sddbus.Conn, done chan<- string) error {
		_, err := conn.StopUnitContext(ctx, unit, "replace", done)
		return err
	})
	var dbusErr dbus.Error
	if errors.As(err, &dbusErr) && dbusErr.Name == "org.freedesktop.systemd1.NoSuchUnit" {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stop scope %s: %w", unit, err)
	}
	return nil
}

// job runs call, which queues a systemd job reporting its result on done,
// and waits for that result.
func (s *SystemdScopes) job(ctx context.Context, call func(conn *sddbus.Conn, done chan<- string) error) error {
	for attempt := 0; ; attempt++ {
		conn, err := s.connect(ctx)
		if err != nil {
			return fmt.Errorf("connect to systemd: %w", err)
		}
		done := make(chan string, 1)
		if err := call(conn, done); err != nil {
			if !conn.Connected() && attempt == 0 {
				s.drop(conn)
				continue // systemd restarted (daemon-reexec): once more
			}
			return err
		}
		select {
		case result := <-done:
			if result != "done" {
				return fmt.Errorf("job %s", result)
			}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *SystemdScopes) connect(ctx context.Context) (*sddbus.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil && s.conn.Connected() {
		return s.conn, nil
	}
	if s.conn != nil {
		s.conn.Close()
	}
	conn, err := sddbus.NewSystemdConnectionContext(ctx)
	if err != nil {
		s.conn = nil
		return nil, err
	}
	s.conn = conn
	return conn, nil
}

func (s *SystemdScopes) drop(conn *sddbus.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == conn {
		s.conn.Close()
		s.conn = nil
	}
}

// Close ends the connection.
func (s *SystemdScopes) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
}
