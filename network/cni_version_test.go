package network

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

func TestConfigVersions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		raw     string
		want    []string
		wantErr string
	}{
		{"cniVersion alone", `{"cniVersion":"1.0.0"}`, []string{"1.0.0"}, ""},
		{"cniVersions beside it, sorted", `{"cniVersion":"1.0.0","cniVersions":["1.0.0","0.3.1","0.4.0"]}`, []string{"0.3.1", "0.4.0", "1.0.0"}, ""},
		{"cniVersions alone", `{"cniVersions":["0.4.0","1.1.0"]}`, []string{"0.4.0", "1.1.0"}, ""},
		{"newer than the library: skipped", `{"cniVersion":"1.0.0","cniVersions":["99.0.0"]}`, []string{"1.0.0"}, ""},
		{"only newer than the library", `{"cniVersion":"99.0.0"}`, nil, "newer than"},
		{"not a version", `{"cniVersion":"1.0.0","cniVersions":["one"]}`, nil, "one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := configVersions([]byte(tc.raw))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("configVersions = %v, %v; want an error mentioning %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("configVersions = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestChooseVersion(t *testing.T) {
	old := []string{"0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0"}
	current := []string{"0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}
	pv := func(byType ...any) pluginVersions {
		p := pluginVersions{supported: map[string][]string{}}
		for i := 0; i < len(byType); i += 2 {
			typ := byType[i].(string)
			p.types = append(p.types, typ)
			p.supported[typ] = byType[i+1].([]string)
		}
		return p
	}
	for _, tc := range []struct {
		name     string
		declared []string
		plugins  pluginVersions
		want     string
		wantErr  []string
	}{
		{"current plugins: the highest declared", []string{"0.4.0", "1.0.0"}, pv("bridge", current, "portmap", current), "1.0.0", nil},
		{"never above the declared", []string{"0.4.0"}, pv("bridge", current), "0.4.0", nil},
		{"old plugins: lowered to what all speak", []string{"0.4.0", "1.0.0"}, pv("bridge", old, "portmap", old), "0.4.0", nil},
		{"one old plugin is enough to lower", []string{"0.4.0", "1.0.0"}, pv("bridge", current, "portmap", old), "0.4.0", nil},
		{"no plugin found: Setup says which", []string{"1.0.0"}, pv(), "1.0.0", nil},
		{"declared only what one plugin lacks", []string{"1.0.0"}, pv("bridge", current, "portmap", old), "", []string{"portmap", "0.4.0", "declares only 1.0.0"}},
		{"no version common to all", []string{"0.3.0", "1.0.0"}, pv("a", []string{"0.3.0"}, "b", []string{"1.0.0"}), "", []string{"a: 0.3.0", "b: 1.0.0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := chooseVersion(tc.declared, tc.plugins)
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("chooseVersion = %q, want an error", got)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not mention %q", err, w)
					}
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("chooseVersion = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// oldPluginNetwork writes a config of testdata/oldnet, a plugin that
// speaks only CNI 0.1.0-0.4.0 as Debian 11's do, and returns a CNI on it.
func oldPluginNetwork(t *testing.T, conf string) (*CNI, *logtest.Hook) {
	t.Helper()
	bin, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "10-old.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	log, hook := logtest.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	return NewCNI(dir, []string{bin}, t.TempDir(), log), hook
}

// A config that declares it is valid under 0.4.0 too (the spec's
// cniVersions, as minicri's own contrib config does) runs at 0.4.0 on
// plugins that speak no newer version: ADD and DEL succeed. Before, libcni
// sent 1.0.0 and every ADD failed with "incompatible CNI versions".
func TestOldPluginsRunConfigAtVersionTheySpeak(t *testing.T) {
	c, hook := oldPluginNetwork(t, `{"cniVersion":"1.0.0","cniVersions":["0.4.0","1.0.0"],"name":"old","plugins":[{"type":"oldnet"}]}`)
	if err := c.Ready(); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	pn := PodNetwork{ID: "pod-old", Name: "p", Namespace: "default", UID: "u", NetNS: "/run/netns/none"}
	res, err := c.Setup(context.Background(), pn)
	if err != nil {
		t.Fatalf("Setup on plugins that speak up to 0.4.0: %v", err)
	}
	if len(res.IPs) != 1 || res.IPs[0].String() != "10.99.0.2" {
		t.Errorf("Setup result %+v, want 10.99.0.2", res)
	}
	if err := c.Teardown(context.Background(), pn); err != nil {
		t.Errorf("Teardown: %v", err)
	}
	var told bool
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.InfoLevel && strings.Contains(e.Message, "runs at CNI version 0.4.0") {
			told = true
		}
	}
	if !told {
		t.Errorf("no log line says the network runs at 0.4.0")
	}
}

// A config that declares only a version the plugins do not speak is not
// loaded: NetworkReady and the log name the plugin and what it speaks,
// instead of every RunPodSandbox failing at ADD.
func TestOldPluginsRefuseConfigOfOneNewerVersion(t *testing.T) {
	c, hook := oldPluginNetwork(t, `{"cniVersion":"1.0.0","name":"old","plugins":[{"type":"oldnet"}]}`)
	err := c.Ready()
	if !errors.Is(err, ErrNotReady) {
		t.Fatalf("Ready = %v, want ErrNotReady", err)
	}
	for _, w := range []string{"10-old.conflist", "plugin oldnet", "0.4.0", "declares only 1.0.0"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Ready error %q does not mention %q", err, w)
		}
	}
	_, setupErr := c.Setup(context.Background(), PodNetwork{ID: "pod-old", Name: "p", Namespace: "default", UID: "u", NetNS: "/run/netns/none"})
	if !errors.Is(setupErr, ErrNotReady) {
		t.Errorf("Setup = %v, want ErrNotReady", setupErr)
	}
	var warned int
	for _, e := range hook.AllEntries() {
		if err, _ := e.Data[logrus.ErrorKey].(error); e.Level == logrus.WarnLevel && err != nil && strings.Contains(err.Error(), "plugin oldnet") {
			warned++
		}
	}
	if warned != 1 {
		t.Errorf("%d warnings name the plugin, want 1 (a config that fails the same way is not logged again)", warned)
	}
}

// A plugin that does not answer VERSION once (a node too busy to run it
// within its bound, seen on a Debian 11 guest under load) leaves the
// network not ready only for a while: it is asked again, and the network
// comes up with nothing changed in the config or plugin directories.
// Before, the failed load was kept until one of them changed.
func TestPluginThatDidNotAnswerVersionIsAskedAgain(t *testing.T) {
	bin, conf, flag := t.TempDir(), t.TempDir(), filepath.Join(t.TempDir(), "answer")
	old, err := os.ReadFile("testdata/oldnet")
	if err != nil {
		t.Fatal(err)
	}
	// oldnet, but its VERSION fails until the flag file exists.
	script := strings.Replace(string(old), "VERSION)\n", "VERSION)\n\t[ -e "+flag+" ] || exit 1\n", 1)
	if err := os.WriteFile(filepath.Join(bin, "oldnet"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(conf, "10-old.conflist"),
		[]byte(`{"cniVersion":"0.4.0","name":"old","plugins":[{"type":"oldnet"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	log, _ := logtest.NewNullLogger()
	c := NewCNI(conf, []string{bin}, t.TempDir(), log)
	// Past the stamps' racy second, a load is kept until something changes.
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range []string{conf, filepath.Join(conf, "10-old.conflist"), bin} {
		for stampOf(p).racy(time.Now()) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if err := c.Ready(); !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), "ask its CNI versions") {
		t.Fatalf("Ready with a plugin that fails VERSION = %v, want ErrNotReady naming the VERSION run", err)
	}
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for err := c.Ready(); err != nil; err = c.Ready() {
		if time.Now().After(deadline) {
			t.Fatalf("Ready 30 s after the plugin answers VERSION: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
