package server

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/config"
	"github.com/minicri/minicri/server/internal/testreq"
)

// What `features` prints, as the runc releases on this machine do, cut to
// what minicri reads.
const (
	featuresRunc115 = `{"ociVersionMin":"1.0.0","mountOptions":["bind","rbind","ro","rro"],"annotations":{"org.opencontainers.runc.version":"1.1.5+ds1"}}`
	// An old runc that could idmap mounts, and a fixed one that cannot.
	featuresRunc127Idmap = `{"mountOptions":["bind","rro"],"linux":{"mountExtensions":{"idmap":{"enabled":true}}},"annotations":{"org.opencontainers.runc.version":"1.2.7"}}`
	featuresRunc128Bare  = `{"mountOptions":["bind"],"annotations":{"org.opencontainers.runc.version":"1.2.8"}}`
	featuresRunc152      = `{"mountOptions":["bind","rro"],"linux":{"mountExtensions":{"idmap":{"enabled":true}}},"annotations":{"org.opencontainers.runc.version":"1.5.2"}}`
	featuresRROOnly      = `{"mountOptions":["bind","rro"],"linux":{"mountExtensions":{"idmap":{"enabled":false}}}}`
	noFeatures           = "" // the binary fails `features`, as crun 1.8 and runc 1.0 do
)

// fakeRuntimeBinary writes dir/name/BASE, a runtime whose `features` prints
// features (or fails when it is empty), and counts its runs in dir/name/runs.
func fakeRuntimeBinary(t *testing.T, dir, name, base, features string) string {
	t.Helper()
	d := filepath.Join(dir, name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\necho run >> " + filepath.Join(d, "runs") + "\n"
	if features == noFeatures {
		script += "echo 'unknown command features' >&2; exit 1\n"
	} else {
		script += "echo '" + features + "'\n"
	}
	p := filepath.Join(d, base)
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// The default handler, when the config names none, is the most capable runc:
// idmapped mounts first, then rro; a tie to the handler named runc; never a
// missing binary nor one that is not a runc.
func TestDefaultHandlerIsTheMostCapableRunc(t *testing.T) {
	type handler struct {
		base, features string
		missing        bool
	}
	cases := []struct {
		name       string
		handlers   map[string]handler
		named      string // runtime.default_handler
		want       string
		wantUserns bool
	}{
		{"current runc beside Debian's", map[string]handler{
			"runc":         {"runc", featuresRunc115, false},
			"runc-current": {"runc", featuresRunc152, false},
			"crun":         {"crun", noFeatures, false},
		}, "", "runc-current", true},
		{"current runc not built", map[string]handler{
			"runc":         {"runc", featuresRunc115, false},
			"runc-current": {"runc", featuresRunc152, true},
		}, "", "runc", false},
		{"a crun with idmap is not a runc", map[string]handler{
			"runc": {"runc", featuresRunc115, false},
			"crun": {"crun", featuresRunc152, false},
		}, "", "runc", false},
		{"rro beats nothing", map[string]handler{
			"runc":   {"runc", noFeatures, false},
			"runc-b": {"runc", featuresRROOnly, false},
		}, "", "runc-b", false},
		{"idmap beats rro", map[string]handler{
			"runc-a": {"runc", featuresRROOnly, false},
			"runc-z": {"runc", featuresRunc152, false},
		}, "", "runc-z", true},
		{"a tie goes to runc", map[string]handler{
			"another": {"runc", featuresRunc152, false},
			"runc":    {"runc", featuresRunc152, false},
		}, "", "runc", true},
		{"a tie without runc goes to the first name", map[string]handler{
			"b": {"runc", featuresRunc152, false},
			"a": {"runc", featuresRunc152, false},
		}, "", "a", true},
		{"no runc binary at all", map[string]handler{
			"crun": {"crun", featuresRunc152, false},
			"kata": {"kata", noFeatures, false},
		}, "", "crun", true},
		{"every runc missing", map[string]handler{
			"runc":         {"runc", featuresRunc115, true},
			"runc-current": {"runc", featuresRunc152, true},
		}, "", "runc", false},
		{"a runc with the security fixes beats one without that can do more", map[string]handler{
			"runc":   {"runc", featuresRunc127Idmap, false},
			"runc-b": {"runc", featuresRunc128Bare, false},
		}, "", "runc-b", false},
		{"a runc with the fixes beats one that does not say", map[string]handler{
			"runc":   {"runc", featuresRROOnly, false},
			"runc-b": {"runc", featuresRunc128Bare, false},
		}, "", "runc-b", false},
		{"the operator's choice stands", map[string]handler{
			"runc":         {"runc", featuresRunc115, false},
			"runc-current": {"runc", featuresRunc152, false},
		}, "runc", "runc", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			s := newRecordsServer(t)
			s.cfg = config.Default()
			s.cfg.Runtime.DefaultHandler = c.named
			s.cfg.Runtime.Handlers = map[string]config.RuntimeHandler{}
			for name, h := range c.handlers {
				p := fakeRuntimeBinary(t, dir, name, h.base, h.features)
				if h.missing {
					p = filepath.Join(dir, name, "gone", h.base)
				}
				s.cfg.Runtime.Handlers[name] = config.RuntimeHandler{Path: p, Root: filepath.Join(dir, name, "root")}
			}
			s.useRuntimes()
			if got := s.cfg.Runtime.DefaultHandler; got != c.want {
				t.Fatalf("default handler = %q, want %q", got, c.want)
			}
			// Status tells the kubelet what a pod without a RuntimeClass
			// gets: the chosen handler's features, under the name "".
			def, named := statusHandler(t, s, ""), statusHandler(t, s, c.want)
			if def.GetFeatures().GetUserNamespaces() != c.wantUserns || !equalFeatures(def, named) {
				t.Errorf("Status: default handler %v, %q %v; want user_namespaces %v for both", def, c.want, named, c.wantUserns)
			}
		})
	}
}

// A start goes on with its recovery while the candidates' `features` run,
// and settles the default once they are done.
func TestStartRuntimesProbesBesideTheStart(t *testing.T) {
	dir := t.TempDir()
	s := newRecordsServer(t)
	s.cfg = config.Default()
	release := filepath.Join(dir, "release")
	p := fakeRuntimeBinary(t, dir, "runc-current", "runc", featuresRunc152)
	// The probe waits for the test: it ends only once startRuntimes has
	// returned.
	wait := "#!/bin/sh\nwhile [ ! -e " + release + " ]; do sleep 0.01; done\n"
	script, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(wait+strings.TrimPrefix(string(script), "#!/bin/sh\n")), 0o755); err != nil {
		t.Fatal(err)
	}
	s.cfg.Runtime.Handlers = map[string]config.RuntimeHandler{
		"runc":         {Path: fakeRuntimeBinary(t, dir, "runc", "runc", featuresRunc115)},
		"runc-current": {Path: p},
	}
	settle := s.startRuntimes()
	if _, err := s.runtimes.Get("runc-current"); err != nil {
		t.Errorf("a handler's runtime before the probes end: %v", err)
	}
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	settle()
	if got, want := s.cfg.Runtime.DefaultHandler, "runc-current"; got != want {
		t.Errorf("default handler = %q, want %q", got, want)
	}
}

// The choice runs each candidate's `features` once, at start: Status and
// creates afterwards read the kept answer, however often the kubelet asks.
func TestDefaultHandlerProbesOnceAtStart(t *testing.T) {
	dir := t.TempDir()
	s := newRecordsServer(t)
	s.cfg = config.Default()
	s.cfg.Runtime.Handlers = map[string]config.RuntimeHandler{
		"runc":         {Path: fakeRuntimeBinary(t, dir, "runc", "runc", featuresRunc115)},
		"runc-current": {Path: fakeRuntimeBinary(t, dir, "runc-current", "runc", featuresRunc152)},
	}
	s.useRuntimes()
	for range 5 {
		statusHandler(t, s, "")
		if err := s.validatePodUserNamespace(usernsSandboxConfig(), ""); err != nil {
			t.Fatalf("a pod with hostUsers: false and no RuntimeClass refused: %v", err)
		}
	}
	for _, name := range []string{"runc", "runc-current"} {
		runs, err := os.ReadFile(filepath.Join(dir, name, "runs"))
		if err != nil || len(runs) != len("run\n") {
			t.Errorf("%s ran %q (%v), want `features` once", name, runs, err)
		}
	}
}

func usernsSandboxConfig() *runtime.PodSandboxConfig {
	cfg := testreq.Sandbox()
	cfg.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{NamespaceOptions: &runtime.NamespaceOption{UsernsOptions: testreq.KubeletUserns()}}
	return cfg
}

func statusHandler(t *testing.T, s *Server, name string) *runtime.RuntimeHandler {
	t.Helper()
	for _, h := range s.runtimeHandlers() {
		if h.GetName() == name {
			return h
		}
	}
	t.Fatalf("Status lists no handler %q", name)
	return nil
}

func equalFeatures(a, b *runtime.RuntimeHandler) bool {
	return a.GetFeatures().GetUserNamespaces() == b.GetFeatures().GetUserNamespaces() &&
		a.GetFeatures().GetRecursiveReadOnlyMounts() == b.GetFeatures().GetRecursiveReadOnlyMounts()
}

// A handler whose runc lacks the fixes of CVE-2025-31133, CVE-2025-52565
// and CVE-2025-52881 is named in the start-up log and in Status's info,
// whether or not it is the default; a fixed one and a crun are not.
func TestHandlerLackingRuncFixesIsNamed(t *testing.T) {
	for _, named := range []string{"", "runc"} {
		dir := t.TempDir()
		s := newRecordsServer(t)
		logger, hook := logtest.NewNullLogger()
		s.log = logrus.NewEntry(logger)
		s.cfg = config.Default()
		s.cfg.Runtime.DefaultHandler = named
		s.cfg.Runtime.Handlers = map[string]config.RuntimeHandler{
			"runc":         {Path: fakeRuntimeBinary(t, dir, "runc", "runc", featuresRunc115)},
			"runc-current": {Path: fakeRuntimeBinary(t, dir, "runc-current", "runc", featuresRunc152)},
			"crun":         {Path: fakeRuntimeBinary(t, dir, "crun", "crun", noFeatures)},
		}
		s.useRuntimes()
		var warned []string
		for _, e := range hook.AllEntries() {
			if e.Level == logrus.WarnLevel && strings.Contains(e.Message, "lacks security fixes") {
				warned = append(warned, fmt.Sprintf("%v %v %v", e.Data["handler"], e.Data["runc_version"], e.Data["missing_fixes"]))
			}
		}
		if want := []string{"runc 1.1.5+ds1 CVE-2025-31133,CVE-2025-52565,CVE-2025-52881"}; !slices.Equal(warned, want) {
			t.Errorf("default_handler %q: warnings %q, want %q", named, warned, want)
		}
		// What Status's info holds under runtimeHandlerInfo, as crictl
		// info prints it.
		printed, err := json.Marshal(s.handlerInfo())
		if err != nil {
			t.Fatal(err)
		}
		var info map[string]struct {
			RuncVersion  string   `json:"runcVersion"`
			MissingFixes []string `json:"missingSecurityFixes"`
		}
		if err := json.Unmarshal(printed, &info); err != nil {
			t.Fatalf("runtimeHandlerInfo %s: %v", printed, err)
		}
		if got := info["runc"]; got.RuncVersion != "1.1.5+ds1" || len(got.MissingFixes) != 3 {
			t.Errorf("Status info of runc = %+v, want version 1.1.5+ds1 and three missing fixes", got)
		}
		if got := info["runc-current"]; got.RuncVersion != "1.5.2" || len(got.MissingFixes) != 0 {
			t.Errorf("Status info of runc-current = %+v, want version 1.5.2 and nothing missing", got)
		}
		if got := info["crun"]; got.RuncVersion != "" || len(got.MissingFixes) != 0 {
			t.Errorf("Status info of crun = %+v, want nothing said", got)
		}
	}
}

// Debian 11's runc (1.0.0~rc93) has no `features` (it exits 3) and says
// its version only to --version, spelled the Debian way; where it is the
// only runc it is the default handler, and lacks every fix of runcFixes.
const runcRC93Script = `#!/bin/sh
case "$1" in
--version) printf 'runc version 1.0.0~rc93+ds1\nspec: 1.0.2-dev\n' ;;
features) echo "No help topic for 'features'" >&2; exit 3 ;;
*) exit 1 ;;
esac
`

// Where the default handler's runc lacks the security fixes, Status says so
// in a condition of its own (not only in the verbose info), and the
// start-up log warns naming the version and the CVEs. Before, Debian 11's
// "1.0.0~rc93+ds1" did not parse as a runc version: nothing was said.
func TestDefaultRuncLackingFixesIsLoud(t *testing.T) {
	dir := t.TempDir()
	rc93 := filepath.Join(dir, "runc")
	if err := os.WriteFile(rc93, []byte(runcRC93Script), 0o755); err != nil {
		t.Fatal(err)
	}
	s := newRecordsServer(t)
	logger, hook := logtest.NewNullLogger()
	s.log = logrus.NewEntry(logger)
	s.cfg = config.Default()
	s.cfg.Runtime.DefaultHandler = ""
	s.cfg.Runtime.Handlers = map[string]config.RuntimeHandler{"runc": {Path: rc93}}
	s.useRuntimes()

	c := s.runcFixesCondition()
	if c.GetStatus() || c.GetReason() != "RuncLacksSecurityFixes" {
		t.Fatalf("condition %+v, want false, reason RuncLacksSecurityFixes", c)
	}
	for _, want := range []string{`"runc"`, "1.0.0~rc93+ds1", rc93, "CVE-2025-31133", "docs/operations.md"} {
		if !strings.Contains(c.GetMessage(), want) {
			t.Errorf("condition message %q does not name %q", c.GetMessage(), want)
		}
	}
	var warned bool
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.WarnLevel && strings.Contains(e.Message, "lacks security fixes") &&
			e.Data["runc_version"] == "1.0.0~rc93+ds1" && e.Data["default"] == true {
			warned = true
		}
	}
	if !warned {
		t.Errorf("no start-up warning names the default handler's runc 1.0.0~rc93+ds1")
	}

	// A default with the fixes: the condition holds.
	s = newRecordsServer(t)
	s.log = logrus.NewEntry(logger)
	s.cfg = config.Default()
	s.cfg.Runtime.DefaultHandler = ""
	s.cfg.Runtime.Handlers = map[string]config.RuntimeHandler{
		"runc":         {Path: rc93},
		"runc-current": {Path: fakeRuntimeBinary(t, dir, "runc-current", "runc", featuresRunc152)},
	}
	s.useRuntimes()
	if c := s.runcFixesCondition(); !c.GetStatus() {
		t.Errorf("condition %+v with runc 1.5.2 as the default, want true", c)
	}
}
