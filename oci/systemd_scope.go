package oci

import (
	"context"
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
// scope goes when its last process exits.
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
	for attempt := 0; ; attempt++ {
		conn, err := s.connect(ctx)
		if err != nil {
			return fmt.Errorf("connect to systemd: %w", err)
		}
		done := make(chan string, 1)
		_, err = conn.StartTransientUnitContext(ctx, unit, "fail", props, done)
		if err != nil {
			if !conn.Connected() && attempt == 0 {
				s.drop(conn)
				continue // systemd restarted (daemon-reexec): once more
			}
			return fmt.Errorf("start scope %s in %s: %w", unit, slice, err)
		}
		select {
		case result := <-done:
			if result != "done" {
				return fmt.Errorf("start scope %s in %s: job %s", unit, slice, result)
			}
			return nil
		case <-ctx.Done():
			return fmt.Errorf("start scope %s in %s: %w", unit, slice, ctx.Err())
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
