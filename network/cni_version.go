package network

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/version"
)

// A node's plugins may be older than the config: Debian 11's plugins speak
// the CNI spec up to 0.4.0 and answer a 1.0.0 config with "incompatible CNI
// versions" at every ADD. So each plugin is asked once, at load, which
// versions it speaks (the VERSION command), and the config runs at the
// highest version it declares (cniVersion, and the spec's cniVersions list
// of every version it is valid under) that every plugin speaks. A config
// that declares only a version some plugin does not speak is not loaded:
// NetworkReady says which plugin speaks which versions. The version a
// config declares is never raised, and never lowered to one it does not
// list: its fields may mean another thing there.

// versionProbeTimeout bounds the VERSION run of one plugin.
const versionProbeTimeout = 10 * time.Second

// versionRetry is how long a network whose plugins did not all answer
// VERSION stays not ready before they are asked again: not at every call,
// which would each wait on a hung plugin.
const versionRetry = 5 * time.Second

// configVersions are the spec versions a config declares it is valid
// under, lowest first: its cniVersion and its cniVersions, without those
// newer than libcni implements (libcni skips those too).
func configVersions(raw []byte) ([]string, error) {
	var doc struct {
		CNIVersion  string   `json:"cniVersion"`
		CNIVersions []string `json:"cniVersions"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	var out []string
	for _, v := range append(doc.CNIVersions, doc.CNIVersion) {
		if v == "" || slices.Contains(out, v) {
			continue
		}
		newer, err := version.GreaterThan(v, version.Current())
		if err != nil {
			return nil, fmt.Errorf("cniVersions entry %q: %w", v, err)
		}
		if !newer {
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("cniVersion %q is newer than the CNI spec minicri implements (%s)", doc.CNIVersion, version.Current())
	}
	slices.SortFunc(out, compareVersions)
	return out, nil
}

func compareVersions(a, b string) int {
	if a == b {
		return 0
	}
	if gt, _ := version.GreaterThan(a, b); gt {
		return 1
	}
	return -1
}

// pluginVersions is what each plugin type of a config speaks.
type pluginVersions struct {
	types     []string // in the config's order, each once
	supported map[string][]string
}

// askPluginVersions runs VERSION of each plugin of list whose binary is
// there; a missing binary is Setup's to report.
func (c *CNI) askPluginVersions(list *libcni.NetworkConfigList) (pluginVersions, error) {
	pv := pluginVersions{supported: map[string][]string{}}
	present, _ := c.findPlugins(list)
	for _, p := range present {
		typ := p.Network.Type
		if _, seen := pv.supported[typ]; seen {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), versionProbeTimeout)
		info, err := c.lib.GetVersionInfo(ctx, typ)
		cancel()
		if err != nil {
			return pv, fmt.Errorf("plugin %s: ask its CNI versions: %w", typ, err)
		}
		pv.types = append(pv.types, typ)
		pv.supported[typ] = info.SupportedVersions()
	}
	return pv, nil
}

// chooseVersion picks the highest of the config's declared versions (lowest
// first) that every plugin speaks, or says which plugin speaks none of them.
func chooseVersion(declared []string, pv pluginVersions) (string, error) {
	for _, v := range slices.Backward(declared) {
		if pv.allSpeak(v) {
			return v, nil
		}
	}
	for _, typ := range pv.types {
		if !slices.ContainsFunc(declared, func(v string) bool { return slices.Contains(pv.supported[typ], v) }) {
			return "", fmt.Errorf("plugin %s speaks CNI versions %s, and the config declares only %s (cniVersion, cniVersions): install plugins that speak it, or declare a version they speak",
				typ, strings.Join(pv.supported[typ], ", "), strings.Join(declared, ", "))
		}
	}
	var each []string
	for _, typ := range pv.types {
		each = append(each, typ+": "+strings.Join(pv.supported[typ], ", "))
	}
	return "", fmt.Errorf("no CNI version of the config (%s) is spoken by every plugin (%s)", strings.Join(declared, ", "), strings.Join(each, "; "))
}

func (pv pluginVersions) allSpeak(v string) bool {
	for _, typ := range pv.types {
		if !slices.Contains(pv.supported[typ], v) {
			return false
		}
	}
	return true
}
