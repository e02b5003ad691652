package network

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/utils"
	"github.com/containernetworking/cni/pkg/version"
)

// confExtensions are the file names a network config may have, as the
// kubelet and containerd read them.
var confExtensions = []string{".conflist", ".conf", ".json"}

// fileStamp identifies one version of a file or directory well enough to
// tell that it changed: a rename, a rewrite or a new entry changes one field.
type fileStamp struct {
	exists bool
	ino    uint64
	size   int64
	mtime  time.Time
	ctime  time.Time
}

func stampOf(path string) fileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileStamp{exists: true, size: fi.Size(), mtime: fi.ModTime()}
	}
	return fileStamp{
		exists: true,
		ino:    st.Ino,
		size:   st.Size,
		mtime:  time.Unix(st.Mtim.Sec, st.Mtim.Nsec),
		ctime:  time.Unix(st.Ctim.Sec, st.Ctim.Nsec),
	}
}

// racy reports whether the stamp is too recent to trust: a second change
// within the same timestamp tick would leave it unchanged (git's "racy
// clean" problem), so such a load is not cached.
func (s fileStamp) racy(now time.Time) bool {
	return s.exists && (now.Sub(s.mtime) < time.Second || now.Sub(s.ctime) < time.Second)
}

// loadedNetwork is the result of reading the config directory once.
type loadedNetwork struct {
	dirStamp  fileStamp
	file      string
	fileStamp fileStamp
	binDirs   []string
	binStamps []fileStamp               // of binDirs: a plugin installed or replaced renames into one
	list      *libcni.NetworkConfigList // nil when err is set
	versions  []string                  // the CNI versions the file declares, lowest first
	err       error
	// retryAt, when set, is when a load whose plugin did not answer VERSION
	// (a node too busy to run it in time, a plugin being replaced) is tried
	// again, whatever changed: such a failure is no fault of the config.
	retryAt time.Time
}

// unchanged reports whether the directory, the chosen file and the plugin
// directories are as they were when l was loaded: a few stat calls instead
// of a reload, which asks every plugin its versions.
func (l *loadedNetwork) unchanged(dir string, now time.Time) bool {
	if l == nil || l.dirStamp.racy(now) || l.fileStamp.racy(now) {
		return false
	}
	if !l.retryAt.IsZero() && !now.Before(l.retryAt) {
		return false
	}
	if stampOf(dir) != l.dirStamp {
		return false
	}
	for i, bin := range l.binDirs {
		if s := stampOf(bin); s.racy(now) || s != l.binStamps[i] {
			return false
		}
	}
	return l.file == "" || stampOf(l.file) == l.fileStamp
}

// stampBinDirs notes the plugin directories' stamps, before the plugins
// are asked anything.
func (l *loadedNetwork) stampBinDirs(binDirs []string) {
	l.binDirs = binDirs
	l.binStamps = make([]fileStamp, len(binDirs))
	for i, bin := range binDirs {
		l.binStamps[i] = stampOf(bin)
	}
}

// loadNetwork reads the first network config of dir in lexical order. Like
// containerd, a broken first file makes the network not ready rather than
// silently falling back to the next one: a typo must not put pods on another
// network. Stamps are taken before reading, so a change made during the read
// is seen by the next check.
func loadNetwork(dir string) *loadedNetwork {
	l := &loadedNetwork{dirStamp: stampOf(dir)}
	files, err := libcni.ConfFiles(dir, confExtensions)
	if err != nil {
		l.err = fmt.Errorf("%w: read network config directory: %w", ErrNotReady, err)
		return l
	}
	if len(files) == 0 {
		l.err = fmt.Errorf("%w: no network config (%s) in %s", ErrNotReady, strings.Join(confExtensions, ", "), dir)
		return l
	}
	sort.Strings(files)
	l.file = files[0]
	l.fileStamp = stampOf(l.file)
	if l.list, l.versions, err = parseNetworkFile(l.file); err != nil {
		l.err = fmt.Errorf("%w: network config %s: %w", ErrNotReady, l.file, err)
	}
	return l
}

// parseNetworkFile reads a .conflist, or a single-plugin .conf/.json, and
// returns it as a self-contained list (see inlineNetwork), with the CNI
// versions it declares (configVersions).
func parseNetworkFile(path string) (*libcni.NetworkConfigList, []string, error) {
	var list *libcni.NetworkConfigList
	var raw []byte
	var err error
	if strings.HasSuffix(path, ".conflist") {
		list, err = libcni.NetworkConfFromFile(path)
		if list != nil {
			raw = list.Bytes
		}
	} else {
		list, raw, err = parseSinglePluginFile(path)
	}
	if err != nil {
		return nil, nil, err
	}
	if err := validateNetwork(list); err != nil {
		return nil, nil, err
	}
	versions, err := configVersions(raw)
	if err != nil {
		return nil, nil, err
	}
	list, err = inlineNetwork(list)
	return list, versions, err
}

// parseSinglePluginFile reads the older one-plugin format, accepting a
// list there too since .json is used for both; raw is the file.
func parseSinglePluginFile(path string) (_ *libcni.NetworkConfigList, raw []byte, _ error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, nil, fmt.Errorf("parse: %w", err)
	}
	if _, isList := probe["plugins"]; isList {
		list, err := libcni.NetworkConfFromBytes(data)
		return list, data, err
	}
	plugin, err := libcni.NetworkPluginConfFromBytes(data)
	if err != nil {
		return nil, nil, err
	}
	return &libcni.NetworkConfigList{
		Name:       plugin.Network.Name,
		CNIVersion: plugin.Network.CNIVersion,
		Plugins:    []*libcni.PluginConfig{plugin},
	}, data, nil
}

func validateNetwork(list *libcni.NetworkConfigList) error {
	if err := utils.ValidateNetworkName(list.Name); err != nil {
		return err
	}
	if list.CNIVersion == "" {
		return errors.New("no cniVersion")
	}
	if _, _, _, err := version.ParseVersion(list.CNIVersion); err != nil {
		return fmt.Errorf("cniVersion %q: %w", list.CNIVersion, err)
	}
	if len(list.Plugins) == 0 {
		return errors.New("no plugins")
	}
	for i, p := range list.Plugins {
		if p.Network.Type == "" {
			return fmt.Errorf("plugin %d has no type", i)
		}
	}
	return nil
}

// inlineNetwork rewrites list as one JSON document that holds every plugin.
// That document is what Setup records for Teardown: DEL after a restart then
// runs exactly the config ADD ran, even if the directory has changed since,
// and plugin files loaded from DIR/NAME/ are not needed again.
func inlineNetwork(list *libcni.NetworkConfigList) (*libcni.NetworkConfigList, error) {
	plugins := make([]json.RawMessage, len(list.Plugins))
	for i, p := range list.Plugins {
		plugins[i] = p.Bytes
	}
	doc, err := json.Marshal(struct {
		CNIVersion   string            `json:"cniVersion"`
		Name         string            `json:"name"`
		DisableCheck bool              `json:"disableCheck,omitempty"`
		DisableGC    bool              `json:"disableGC,omitempty"`
		Plugins      []json.RawMessage `json:"plugins"`
	}{list.CNIVersion, list.Name, list.DisableCheck, list.DisableGC, plugins})
	if err != nil {
		return nil, fmt.Errorf("inline network %s: %w", list.Name, err)
	}
	return libcni.NetworkConfFromBytes(doc)
}
