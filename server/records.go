package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"google.golang.org/protobuf/proto"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/conmon"
	"github.com/minicri/minicri/network"
	"github.com/minicri/minicri/store"
)

// stateCreating is the first state of both kinds of record. A record is
// written in it before any of the sandbox's or container's resources is
// made (its object, in memory only, comes just before), so that a daemon
// killed half-way knows at start what to roll back. Untyped, so that it is
// both a sandboxRecordState and a containerRecordState.
const stateCreating = "creating"

// madeRecord reports whether a record's object is made: whether its create
// call has got past stateCreating. The list calls leave the others out, as
// containerd and cri-o do (they store a sandbox or container only once it
// is made): the kubelet's relist would otherwise see a sandbox being
// created as one that died (NOTREADY, with no earlier state), and a
// container being created in an unknown state, while the call that makes
// it has not yet answered. NRI's RunPodSandbox and CreateContainer hooks
// run in this state too, so plugins see no object the kubelet may
// already act on.
func madeRecord[S ~string](state S) bool { return state != stateCreating }

// sandboxRecordState is the state of a sandbox record. The values are those
// written to disk by every earlier version: do not change them.
type sandboxRecordState string

// The states of a sandbox record, besides stateCreating.
const (
	stateReady    sandboxRecordState = "ready"
	stateNotReady sandboxRecordState = "notready"
)

func (s sandboxRecordState) String() string { return string(s) }

// containerRecordState is the state of a container record, as written to
// disk (see sandboxRecordState).
type containerRecordState string

// The states of a container record, besides stateCreating.
const (
	stateCreated containerRecordState = "created"
	stateRunning containerRecordState = "running"
	stateExited  containerRecordState = "exited"
)

func (s containerRecordState) String() string { return string(s) }

// sandboxRecord is what minicri keeps about a pod sandbox, on disk and in memory.
type sandboxRecord struct {
	ID          string
	Name        string // the reserved name: metadata made unique
	Metadata    podMetadata
	Labels      map[string]string
	Annotations map[string]string
	Handler     string
	CreatedAt   int64 // unix nanoseconds
	State       sandboxRecordState

	Dir        string             // RUN_DIR/pods/ID: pod files and pins
	Namespaces network.Namespaces // pinned namespaces; empty paths for host ones
	NetworkUp  bool               // CNI ADD done, DEL not yet
	IPs        []string
	ShmMounted bool         // Dir/shm is a tmpfs of the pod's own
	Infra      conmon.Infra // the PID 1 of a pod-wide PID namespace; zero when none

	Config []byte // the PodSandboxConfig, protobuf-encoded
}

type podMetadata struct {
	Name, Namespace, UID string
	Attempt              uint32
}

// containerRecord is what minicri keeps about a container.
type containerRecord struct {
	ID          string
	Name        string // the reserved name
	SandboxID   string
	Metadata    containerMetadata
	Labels      map[string]string
	Annotations map[string]string
	Image       string // as the kubelet asked for it
	ImageID     string // the image's config digest
	ImageRef    string // a repo digest of the image, or its ID
	CreatedAt   int64
	StartedAt   int64
	FinishedAt  int64
	State       containerRecordState
	ExitCode    int32
	Reason      string
	Message     string
	LogPath     string // absolute; empty when the kubelet asked for no log
	Bundle      string
	Handler     string
	CgroupsPath string
	StopSignal  string // the image's or the config's stop signal, e.g. SIGTERM
	Monitor     monitorRef
	// ImageVolumes are the container's image volumes, named before they
	// are made so that a failed create or a removal finds them.
	ImageVolumes []imageVolume `json:",omitempty"`
	// User is the identity of the container's process: as configured at
	// create, as /proc showed it once the process ran.
	User *containerUser `json:",omitempty"`

	Config []byte // the ContainerConfig, protobuf-encoded
}

type containerMetadata struct {
	Name    string
	Attempt uint32
}

// monitorRef names a container's monitor process. The start time tells a
// restarted daemon whether the pid still belongs to that monitor. A shared
// monitor takes further containers on the join socket in JoinDir.
type monitorRef struct {
	PID       int
	StartTime uint64
	JoinDir   string `json:",omitempty"`
}

// newID returns a random 64-hex-digit ID, the form the kubelet and crictl expect.
func newID() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("read random: %v", err)) // the kernel's RNG does not fail
	}
	return hex.EncodeToString(b)
}

// sandboxName is the name the CRI reserves for a sandbox: one per
// (name, namespace, uid, attempt). Quoting keeps it unambiguous.
func sandboxName(m *runtime.PodSandboxMetadata) string {
	return fmt.Sprintf("%q/%q/%q/%d", m.GetName(), m.GetNamespace(), m.GetUid(), m.GetAttempt())
}

// containerName reserves one container per (name, attempt) in a sandbox.
func containerName(sandboxID string, m *runtime.ContainerMetadata) string {
	return fmt.Sprintf("%s/%q/%d", sandboxID, m.GetName(), m.GetAttempt())
}

func (r *sandboxRecord) config() (*runtime.PodSandboxConfig, error) {
	var c runtime.PodSandboxConfig
	if err := proto.Unmarshal(r.Config, &c); err != nil {
		return nil, fmt.Errorf("decode config of sandbox %s: %w", r.ID, err)
	}
	return &c, nil
}

func (r *containerRecord) config() (*runtime.ContainerConfig, error) {
	var c runtime.ContainerConfig
	if err := proto.Unmarshal(r.Config, &c); err != nil {
		return nil, fmt.Errorf("decode config of container %s: %w", r.ID, err)
	}
	return &c, nil
}

// stageFirstRecord writes a new object's first record before anything of it
// is made, so that a crash from here on is rolled back at start from it. The
// write is staged, not durable (see store.Stage): each caller says why that
// is enough for what it makes.
func stageFirstRecord[T any, O store.Object[T]](ctx context.Context, table *store.Table[T, O], id string, rec T, crashAt string) error {
	return step(ctx, stepOf{phase: "record", crash: crashAt}, func(context.Context) error { return table.Stage(id, rec) })
}

// undoOnFailure is deferred by a handler right after it recorded a new
// object: when the handler fails (*retErr set), undo removes what was made
// so far, with a context that outlives the caller's cancellation. What undo
// cannot remove is logged and left to start-up repair, which finds it from
// the record.
func (s *Server) undoOnFailure(ctx context.Context, retErr *error, kind, id string, undo func(context.Context) error) {
	if *retErr == nil {
		return
	}
	if err := undo(context.WithoutCancel(ctx)); err != nil {
		s.log.WithField(kind, id).WithError(err).Warn("cleanup of a failed " + kind + " left something; start-up repair will retry")
	}
}
