package network

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/libcni"

	"github.com/minicri/minicri/internal/atomicfile"
)

// attachment is what Teardown needs to undo one Setup. It is written before
// the first plugin runs: libcni caches its result only once the whole ADD
// has succeeded, so without this record a daemon killed halfway through ADD
// would leave an IP that nothing knows to release. It is removed once DEL has
// succeeded, which is what makes a second Teardown a no-op.
type attachment struct {
	Network        json.RawMessage `json:"network"` // the inlined list ADD ran
	IfName         string          `json:"ifName"`
	NetNS          string          `json:"netns"`
	Args           [][2]string     `json:"args,omitempty"`
	CapabilityArgs map[string]any  `json:"capabilityArgs,omitempty"`
}

func (a *attachment) runtimeConf(containerID, netns string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID:    containerID,
		NetNS:          netns,
		IfName:         a.IfName,
		Args:           a.Args,
		CapabilityArgs: a.CapabilityArgs,
	}
}

// errBadRecord marks an attachment record that cannot be decoded.
var errBadRecord = errors.New("unreadable attachment record")

// attachmentStore keeps one attachment file per pod under dir.
type attachmentStore struct {
	dir string
}

func (s attachmentStore) path(podID string) string {
	return filepath.Join(s.dir, podID+".json")
}

// write stores a atomically (temp file, fsync, rename, fsync of the dir): after a crash the
// record is either whole or absent. fsync matters for reboots, where
// host-local's IP reservations on disk outlive the namespaces.
func (s attachmentStore) write(podID string, a *attachment) error {
	data, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("encode attachment of pod %s: %w", podID, err)
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("record attachment of pod %s: %w", podID, err)
	}
	if err := atomicfile.Write(s.path(podID), data, 0o600); err != nil {
		return fmt.Errorf("record attachment of pod %s: %w", podID, err)
	}
	return nil
}

// read returns the recorded attachment; an error matching fs.ErrNotExist
// means the pod has no network to tear down.
func (s attachmentStore) read(podID string) (*attachment, error) {
	data, err := os.ReadFile(s.path(podID))
	if err != nil {
		return nil, err
	}
	var a attachment
	if err := json.Unmarshal(data, &a); err != nil {
		return nil, fmt.Errorf("%w %s: %w", errBadRecord, s.path(podID), err)
	}
	if _, err := libcni.NetworkConfFromBytes(a.Network); err != nil {
		return nil, fmt.Errorf("%w %s: network config: %w", errBadRecord, s.path(podID), err)
	}
	return &a, nil
}

func (s attachmentStore) remove(podID string) error {
	if err := os.Remove(s.path(podID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove attachment record of pod %s: %w", podID, err)
	}
	return nil
}

// list returns the IDs of every pod with a recorded attachment.
func (s attachmentStore) list() ([]string, error) {
	entries, err := os.ReadDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list attachment records: %w", err)
	}
	var ids []string
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".json") {
			continue // temp files of a write that never finished
		}
		ids = append(ids, strings.TrimSuffix(name, ".json"))
	}
	return ids, nil
}
