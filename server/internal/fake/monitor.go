package fake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/minicri/minicri/conmon"
	"github.com/minicri/minicri/conmon/wire"
)

// firstPID is above any pid_max: conmon.Alive says no to a fake's pids.
const firstPID = 1 << 23

// Monitor serves containers as conmon does, without processes: it keeps
// each container's watch channel and writes its exit file on Exit.
type Monitor struct {
	Failures
	mu         sync.Mutex
	nextPID    int
	served     map[string]conmon.Options // by container ID
	watches    map[string]chan struct{}  // by socket dir
	monitors   map[string]conmon.Created // by join dir
	infra      map[int]bool
	reopens    map[string]int // by socket dir
	cancels    int
	watchCalls int // WatchContainer calls, failed or not

	// AttachOutput is what an Attach gets on stdout.
	AttachOutput string
	// OnStopPause, when set, runs after StopPause stopped an infra
	// process: a test ends the containers of its PID namespace, as the
	// kernel does.
	OnStopPause func(conmon.Infra)
}

func NewMonitor() *Monitor {
	return &Monitor{nextPID: firstPID, served: map[string]conmon.Options{}, watches: map[string]chan struct{}{},
		monitors: map[string]conmon.Created{}, infra: map[int]bool{}, reopens: map[string]int{}}
}

func (m *Monitor) pid() int {
	m.nextPID++
	return m.nextPID
}

func (m *Monitor) Create(ctx context.Context, o conmon.Options) (conmon.Created, error) {
	if err := m.err("Create"); err != nil {
		return conmon.Created{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c := conmon.Created{MonitorPID: m.pid(), ContainerPID: m.pid(), MonitorStartTime: 1}
	if o.JoinDir != "" {
		m.monitors[o.JoinDir] = c
	}
	m.serve(o)
	return c, nil
}

// BeginJoin begins a join of the monitor created with joinDir, which
// takes the container at Finish. A failure set for "BeginJoin" comes from
// here; one set for "Join" comes from Finish, where a real monitor's
// refusal or failed create shows.
func (m *Monitor) BeginJoin(ctx context.Context, joinDir string, o conmon.Options) (*PendingJoin, error) {
	if err := m.err("BeginJoin"); err != nil {
		return nil, err
	}
	return &PendingJoin{m: m, joinDir: joinDir, o: o}, nil
}

// PendingJoin is a fake monitor's join between BeginJoin and Finish.
type PendingJoin struct {
	m       *Monitor
	joinDir string
	o       conmon.Options
}

func (p *PendingJoin) Finish() (conmon.Created, error) { return p.m.join(p.joinDir, p.o) }

// Cancel counts the joins given up (Cancels).
func (p *PendingJoin) Cancel() {
	p.m.mu.Lock()
	p.m.cancels++
	p.m.mu.Unlock()
}

// WatchCalls counts the WatchContainer calls, failed or not.
func (m *Monitor) WatchCalls() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.watchCalls
}

// Cancels counts the PendingJoins cancelled.
func (m *Monitor) Cancels() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cancels
}

// join has the monitor created with joinDir take the container.
func (m *Monitor) join(joinDir string, o conmon.Options) (conmon.Created, error) {
	if err := m.err("Join"); err != nil {
		return conmon.Created{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.monitors[joinDir]
	if !ok {
		return conmon.Created{}, fmt.Errorf("join %s: %w", joinDir, os.ErrNotExist)
	}
	c.ContainerPID = m.pid()
	m.serve(o)
	return c, nil
}

func (m *Monitor) serve(o conmon.Options) {
	m.served[o.ID] = o
	m.watches[o.SocketDir] = make(chan struct{})
}

func (m *Monitor) WatchContainer(socketDir string, done func()) error {
	m.mu.Lock()
	m.watchCalls++
	m.mu.Unlock()
	ch, err := m.watch(socketDir)
	if err != nil {
		return err
	}
	go func() {
		<-ch
		done()
	}()
	return nil
}

// watch is the channel closed when the container in socketDir is done.
func (m *Monitor) watch(socketDir string) (<-chan struct{}, error) {
	if err := m.err("WatchContainer"); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	ch, ok := m.watches[socketDir]
	if !ok {
		return nil, fmt.Errorf("watch %s: no monitor socket: %w", socketDir, os.ErrNotExist)
	}
	return ch, nil
}

// Attach gives stdout AttachOutput, then echoes stdin there until its end,
// as `cat` in an attached container does.
func (m *Monitor) Attach(ctx context.Context, socketDir string, stdin io.Reader, stdout, stderr io.Writer, resize <-chan conmon.Size) error {
	if _, err := m.watch(socketDir); err != nil {
		return err
	}
	if stdout == nil {
		return nil
	}
	if _, err := io.WriteString(stdout, m.AttachOutput); err != nil {
		return err
	}
	if stdin != nil {
		_, err := io.Copy(stdout, stdin)
		return err
	}
	return nil
}

// ReopenLog counts the reopens of a served container's log.
func (m *Monitor) ReopenLog(ctx context.Context, socketDir string) error {
	if _, err := m.watch(socketDir); err != nil {
		return err
	}
	if err := m.err("ReopenLog"); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reopens[socketDir]++
	return nil
}

// Reopens counts the log reopens of the container whose socket is in socketDir.
func (m *Monitor) Reopens(socketDir string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reopens[socketDir]
}

// Exit ends a container with code, as its monitor does: the exit file
// first, then the watch closes.
func (m *Monitor) Exit(id string, code int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.served[id]
	if !ok {
		return fmt.Errorf("container %s: not served", id)
	}
	exit := wire.ExitStatus{Code: code, At: time.Now()}
	if err := os.WriteFile(o.ExitFile, exit.Marshal(), 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	m.stop(o)
	return nil
}

// Die ends the monitor of a container without an exit file, as a kill -9 does.
func (m *Monitor) Die(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if o, ok := m.served[id]; ok {
		m.stop(o)
	}
}

func (m *Monitor) stop(o conmon.Options) {
	delete(m.served, o.ID)
	if ch, ok := m.watches[o.SocketDir]; ok {
		close(ch)
		delete(m.watches, o.SocketDir)
	}
}

// Serving counts the containers served now.
func (m *Monitor) Serving() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.served)
}

func (m *Monitor) StartPause(binary, podDir string, _ conmon.PauseOptions) (conmon.Infra, error) {
	if err := m.err("StartPause"); err != nil {
		return conmon.Infra{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	pid := m.pid()
	m.infra[pid] = true
	return conmon.Infra{PID: pid, StartTime: 1}, nil
}

// StopPause stops an infra process; a zero or stopped one is fine.
func (m *Monitor) StopPause(_ context.Context, in conmon.Infra) error {
	var stopped bool
	err := m.locked("StopPause", &m.mu, func() {
		stopped = m.infra[in.PID]
		delete(m.infra, in.PID)
	})
	if stopped && m.OnStopPause != nil {
		m.OnStopPause(in)
	}
	return err
}

// Infras counts the infra processes running.
func (m *Monitor) Infras() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.infra)
}
