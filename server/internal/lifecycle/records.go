// Package lifecycle holds what the CRI handlers of server/ share of an
// object's life: the records of sandboxes and containers as they are on
// disk, and the ordered steps of a lifecycle call (Step), with their metric
// phases and their crash points. It knows no gRPC.
package lifecycle

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"google.golang.org/protobuf/proto"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/conmon"
	"github.com/minicri/minicri/network"
)

// StateCreating is the first state of both kinds of record. A record is
// written in it before any of the sandbox's or container's resources is
// made (its object, in memory only, comes just before), so that a daemon
// killed half-way knows at start what to roll back. Untyped, so that it is
// both a SandboxRecordState and a ContainerRecordState.
const StateCreating = "creating"

// Made reports whether a record's object is made: whether its create
// call has got past StateCreating. The list calls leave the others out, as
// containerd and cri-o do (they store a sandbox or container only once it
// is made): the kubelet's relist would otherwise see a sandbox being
// created as one that died (NOTREADY, with no earlier state), and a
// container being created in an unknown state, while the call that makes
// it has not yet answered. NRI's RunPodSandbox and CreateContainer hooks
// run in this state too, so plugins see no object the kubelet may
// already act on.
func Made[S ~string](state S) bool { return state != StateCreating }

// SandboxRecordState is the state of a sandbox record. The values are those
// written to disk by every earlier version: do not change them.
type SandboxRecordState string

// The states of a sandbox record, besides StateCreating.
const (
	StateReady    SandboxRecordState = "ready"
	StateNotReady SandboxRecordState = "notready"
)

func (s SandboxRecordState) String() string { return string(s) }

// ContainerRecordState is the state of a container record, as written to
// disk (see SandboxRecordState).
type ContainerRecordState string

// The states of a container record, besides StateCreating.
const (
	StateCreated ContainerRecordState = "created"
	StateRunning ContainerRecordState = "running"
	StateExited  ContainerRecordState = "exited"
)

func (s ContainerRecordState) String() string { return string(s) }

// SandboxRecord is what minicri keeps about a pod sandbox, on disk and in memory.
type SandboxRecord struct {
	ID          string
	Name        string // the reserved name: metadata made unique
	Metadata    PodMetadata
	Labels      map[string]string
	Annotations map[string]string
	Handler     string
	CreatedAt   int64 // unix nanoseconds
	State       SandboxRecordState

	Dir        string             // RUN_DIR/pods/ID: pod files and pins
	Namespaces network.Namespaces // pinned namespaces; empty paths for host ones
	NetworkUp  bool               // CNI ADD done, DEL not yet
	IPs        []string
	ShmMounted bool         // Dir/shm is a tmpfs of the pod's own
	Infra      conmon.Infra // the PID 1 of a pod-wide PID namespace; zero when none

	Config []byte // the PodSandboxConfig, protobuf-encoded
}

type PodMetadata struct {
	Name, Namespace, UID string
	Attempt              uint32
}

// ContainerRecord is what minicri keeps about a container.
type ContainerRecord struct {
	ID          string
	Name        string // the reserved name
	SandboxID   string
	Metadata    ContainerMetadata
	Labels      map[string]string
	Annotations map[string]string
	Image       string // as the kubelet asked for it
	ImageID     string // the image's config digest
	ImageRef    string // a repo digest of the image, or its ID
	CreatedAt   int64
	StartedAt   int64
	FinishedAt  int64
	State       ContainerRecordState
	ExitCode    int32
	Reason      string
	Message     string
	LogPath     string // absolute; empty when the kubelet asked for no log
	Bundle      string
	Handler     string
	CgroupsPath string
	StopSignal  string // the image's or the config's stop signal, e.g. SIGTERM
	Monitor     MonitorRef
	// ImageVolumes are the container's image volumes, named before they
	// are made so that a failed create or a removal finds them.
	ImageVolumes []ImageVolume `json:",omitempty"`
	// User is the identity of the container's process: as configured at
	// create, as /proc showed it once the process ran.
	User *ContainerUser `json:",omitempty"`

	Config []byte // the ContainerConfig, protobuf-encoded
}

type ContainerMetadata struct {
	Name    string
	Attempt uint32
}

// MonitorRef names a container's monitor process. The start time tells a
// restarted daemon whether the pid still belongs to that monitor. A shared
// monitor takes further containers on the join socket in JoinDir.
type MonitorRef struct {
	PID       int
	StartTime uint64
	JoinDir   string `json:",omitempty"`
}

// NewID returns a random 64-hex-digit ID, the form the kubelet and crictl expect.
func NewID() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("read random: %v", err)) // the kernel's RNG does not fail
	}
	return hex.EncodeToString(b)
}

// SandboxName is the name the CRI reserves for a sandbox: one per
// (name, namespace, uid, attempt). Quoting keeps it unambiguous.
func SandboxName(m *runtime.PodSandboxMetadata) string {
	return fmt.Sprintf("%q/%q/%q/%d", m.GetName(), m.GetNamespace(), m.GetUid(), m.GetAttempt())
}

// ContainerName reserves one container per (name, attempt) in a sandbox.
func ContainerName(sandboxID string, m *runtime.ContainerMetadata) string {
	return fmt.Sprintf("%s/%q/%d", sandboxID, m.GetName(), m.GetAttempt())
}

// DecodeConfig is the PodSandboxConfig the record keeps.
func (r *SandboxRecord) DecodeConfig() (*runtime.PodSandboxConfig, error) {
	var c runtime.PodSandboxConfig
	if err := proto.Unmarshal(r.Config, &c); err != nil {
		return nil, fmt.Errorf("decode config of sandbox %s: %w", r.ID, err)
	}
	return &c, nil
}

// DecodeConfig is the ContainerConfig the record keeps.
func (r *ContainerRecord) DecodeConfig() (*runtime.ContainerConfig, error) {
	var c runtime.ContainerConfig
	if err := proto.Unmarshal(r.Config, &c); err != nil {
		return nil, fmt.Errorf("decode config of container %s: %w", r.ID, err)
	}
	return &c, nil
}

// StageFirstRecord writes a new object's first record before anything of it
// is made, so that a crash from here on is rolled back at start from it. The
// write is staged, not durable (see store.Stage): each caller says why that
// is enough for what it makes.
// table is a store.Table, or what stands for one.
func StageFirstRecord[T any](ctx context.Context, table interface{ Stage(id string, rec T) error }, id string, rec T, crashAt string) error {
	return Step(ctx, StepOf{Phase: "record", Crash: crashAt}, func(context.Context) error { return table.Stage(id, rec) })
}

// ImageVolume is one image volume (a mount with Mount.image, KEP-4639) of a
// container: a read-only view of an image, kept in the image store as a
// rootfs of its own so that the image cannot be removed while it is mounted.
type ImageVolume struct {
	ID       string // the image store's rootfs ID: imageVolumeID
	Mount    int    // the index of its mount in the container config
	ImageID  string // the image's config digest: PullImage's image_ref, the mount's in ContainerStatus
	ImageRef string // the image's repo digest, or its ID: ContainerStatus' mount image
}

// ContainerUser is the identity of a container's process, as
// ContainerStatus.user reports it (KEP-3619): the kubelet shows it in the
// pod's status so that a user can see which groups the process really has.
type ContainerUser struct {
	UID    int64
	GID    int64
	Groups []int64
}
