package config

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// load parses args as the daemon does and loads the result.
func load(t *testing.T, args ...string) (Config, error) {
	t.Helper()
	fs := flag.NewFlagSet("minicri", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var f Flags
	f.Register(fs)
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	return f.Load()
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "minicri.toml")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaultsWithoutFile(t *testing.T) {
	cfg, err := load(t, "--config", "")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cfg.Listen, "/run/minicri/minicri.sock"; got != want {
		t.Errorf("listen = %q, want %q", got, want)
	}
	if got, want := cfg.CgroupDriver, ""; got != want {
		t.Errorf("cgroup_driver = %q, want %q (unset: detected at start)", got, want)
	}
	if got, want := cfg.CDI, (CDIConfig{Enabled: true, SpecDirs: []string{"/etc/cdi", "/var/run/cdi"}}); !reflect.DeepEqual(got, want) {
		t.Errorf("cdi = %+v, want %+v (containerd's defaults)", got, want)
	}
	if got, want := cfg.Runtime.Handlers["runc"].Root, "/run/minicri/runtime/runc"; got != want {
		t.Errorf("runc root = %q, want %q (derived from run_dir)", got, want)
	}
}

func TestFileThenFlags(t *testing.T) {
	path := writeFile(t, `
root = "/srv/minicri"
log_level = "debug"
[streaming]
port = 10010
[image]
pull_timeout = "2m"
[image.registries."127.0.0.1:5000"]
mirrors = ["http://127.0.0.1:5001"]
insecure = true
`)
	cfg, err := load(t, "--config", path, "--log-level", "warn", "--cni-bin-dirs", "/a,/b", "--run-dir", "/run/x", "--cdi-spec-dirs", "/cdi/a,/cdi/b", "--cdi-enabled=false")
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"root from file", cfg.Root, "/srv/minicri"},
		{"log_level: flag wins over file", cfg.LogLevel, "warn"},
		{"streaming.port from file", cfg.Streaming.Port, 10010},
		{"image.pull_timeout from file", cfg.Image.PullTimeout.Std(), 2 * time.Minute},
		{"cni.bin_dirs from flag", cfg.CNI.BinDirs, []string{"/a", "/b"}},
		{"registry mirror", cfg.Image.Registries["127.0.0.1:5000"].Mirrors, []string{"http://127.0.0.1:5001"}},
		{"registry insecure", cfg.Image.Registries["127.0.0.1:5000"].Insecure, true},
		{"handler root follows --run-dir", cfg.Runtime.Handlers["runc"].Root, "/run/x/runtime/runc"},
		{"untouched default", cfg.LogFormat, "text"},
		{"cdi.spec_dirs from flag", cfg.CDI.SpecDirs, []string{"/cdi/a", "/cdi/b"}},
		{"cdi.enabled from flag", cfg.CDI.Enabled, false},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestBadConfigNamesTheKey(t *testing.T) {
	cases := []struct {
		name string
		file string
		args []string
		want string
	}{
		{"unknown key", "lisen = \"/x\"\n", nil, `"lisen"`},
		{"unknown nested key", "[streaming]\nprot = 1\n", nil, `"streaming.prot"`},
		{"wrong type", "streaming = 3\n", nil, "streaming"},
		{"bad enum in file", "cgroup_driver = \"cgroupv3\"\n", nil, `"cgroup_driver"`},
		{"bad duration in file", "shutdown_timeout = \"soon\"\n", nil, "shutdown_timeout"},
		{"relative root", "root = \"var/lib\"\n", nil, `"root"`},
		{"port out of range", "", []string{"--streaming-port", "70000"}, `"streaming.port"`},
		{"flag not an integer", "", []string{"--streaming-port", "ten"}, "--streaming-port"},
		{"bad enum flag", "", []string{"--log-format", "xml"}, `"log_format"`},
		{"default handler missing", "[runtime]\ndefault_handler = \"kata\"\n", nil, `"runtime.default_handler"`},
		{"relative handler root", "[runtime.handlers.runc]\npath = \"runc\"\nroot = \"state\"\n", nil, `"runtime.handlers.runc.root"`},
		{"metrics off loopback", "[metrics]\naddress = \"10.0.0.1:9388\"\n", nil, `"metrics.address"`},
		{"no image download", "[image]\nmax_concurrent_downloads = 0\n", nil, `"image.max_concurrent_downloads"`},
		{"tls half set", "[streaming]\ntls_cert = \"/c.pem\"\n", nil, "tls_cert"},
		{"relative cdi spec dir", "[cdi]\nspec_dirs = [\"etc/cdi\"]\n", nil, `"cdi.spec_dirs"`},
		{"relative conf template", "[cni]\nconf_template = \"tmpl.json\"\n", nil, `"cni.conf_template"`},
		{"relative conf template flag", "", []string{"--cni-conf-template", "tmpl.json"}, `"cni.conf_template"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"--config", writeFile(t, c.file)}, c.args...)
			_, err := load(t, args...)
			if err == nil {
				t.Fatalf("config accepted, want an error naming %s", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not name %s", err, c.want)
			}
		})
	}
}

// A file's handler without a path gets its name as the path (fillDerived);
// a Config built in code is checked too.
func TestValidateRefusesAHandlerWithoutAPath(t *testing.T) {
	cfg := Default()
	cfg.fillDerived()
	cfg.Runtime.Handlers["kata"] = RuntimeHandler{Root: "/run/kata"}
	var invalid *InvalidError
	if err := cfg.Validate(); !errors.As(err, &invalid) || invalid.Key != "runtime.handlers.kata.path" {
		t.Errorf("Validate = %v, want an error naming runtime.handlers.kata.path", err)
	}
}

func TestExplicitMissingFileIsAnError(t *testing.T) {
	_, err := load(t, "--config", filepath.Join(t.TempDir(), "nope.toml"))
	if err == nil {
		t.Fatal("a --config that does not exist was accepted")
	}
}

func TestFileHandlersReplaceDefaults(t *testing.T) {
	path := writeFile(t, "[runtime.handlers.runc]\npath = \"/usr/sbin/runc\"\n")
	cfg, err := load(t, "--config", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cfg.Runtime.Handlers["crun"]; ok {
		t.Error("crun handler kept although the file lists only runc")
	}
	if got := cfg.Runtime.Handlers["runc"]; got.Path != "/usr/sbin/runc" || got.Root != "/run/minicri/runtime/runc" {
		t.Errorf("runc handler = %+v", got)
	}
}

// The printed default config is a valid file that loads back to the defaults,
// and every key in it carries a comment.
func TestRenderRoundTrip(t *testing.T) {
	text := Render(Default(), Node{})
	cfg, err := load(t, "--config", writeFile(t, text))
	if err != nil {
		t.Fatalf("rendered config does not load: %v\n%s", err, text)
	}
	want, _ := load(t, "--config", "")
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("round trip changed the config:\n got %+v\nwant %+v", cfg, want)
	}
	lines := strings.Split(text, "\n")
	for i, line := range lines {
		isKey := strings.Contains(line, " = ") && !strings.HasPrefix(line, "#")
		isTable := strings.HasPrefix(line, "[") && !strings.Contains(line, "\"")
		if (isKey || isTable) && (i == 0 || !strings.HasPrefix(lines[i-1], "#")) {
			t.Errorf("line %d %q has no comment above it", i+1, line)
		}
	}
}

func TestEveryScalarKeyIsAFlag(t *testing.T) {
	fs := flag.NewFlagSet("minicri", flag.ContinueOnError)
	var f Flags
	f.Register(fs)
	def := Default()
	for _, l := range leaves(reflect.ValueOf(&def).Elem(), "") {
		if fs.Lookup(FlagName(l.key)) == nil {
			t.Errorf("key %s has no flag --%s", l.key, FlagName(l.key))
		}
	}
	for _, name := range []string{"config", "listen", "root", "run-dir", "log-level"} {
		if fs.Lookup(name) == nil {
			t.Errorf("flag --%s missing", name)
		}
	}
}

// TestImageUnpackLimits: the limits take 64-bit values from flags and the
// file, and a limit of 0 (of these and of the streaming server's) is
// refused naming its key.
func TestImageUnpackLimits(t *testing.T) {
	cfg, err := load(t, "--config", writeFile(t, "[image]\nmax_path_depth = 64\n"), "--image-max-unpacked-bytes", "1099511627776")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Image.MaxUnpackedBytes != 1<<40 || cfg.Image.MaxPathDepth != 64 || cfg.Image.MaxUnpackedEntries != 1_000_000 {
		t.Errorf("image limits = %d bytes, %d entries, depth %d; want 1 TiB, the default, 64",
			cfg.Image.MaxUnpackedBytes, cfg.Image.MaxUnpackedEntries, cfg.Image.MaxPathDepth)
	}
	for _, key := range []string{"image.max_unpacked_bytes", "image.max_unpacked_entries", "image.max_path_depth",
		"streaming.request_timeout", "streaming.idle_conn_timeout", "streaming.max_connections"} {
		_, err := load(t, "--config", "", "--"+FlagName(key), "0")
		var inv *InvalidError
		if !errors.As(err, &inv) || inv.Key != key {
			t.Errorf("--%s 0: %v, want an error naming %s", FlagName(key), err, key)
		}
	}
}

func TestDiff(t *testing.T) {
	a := Default()
	b := Default()
	b.LogLevel = "debug"
	b.Image.Registries = map[string]RegistryConfig{"docker.io": {Insecure: true}}
	b.Streaming.Port = 1
	got := strings.Join(Diff(a, b), " ")
	if got != "log_level streaming.port image.registries" {
		t.Errorf("Diff = %q", got)
	}
	if d := Diff(a, Default()); len(d) != 0 {
		t.Errorf("Diff of equal configs = %v", d)
	}
}
