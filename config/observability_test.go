package config

import (
	"strings"
	"testing"
)

func TestObservabilityAddresses(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string // "" accepted, else the key the error names
	}{
		{"off by default", nil, ""},
		{"metrics on loopback", []string{"--metrics-address", "127.0.0.1:9388"}, ""},
		{"metrics on ipv6 loopback", []string{"--metrics-address", "[::1]:9388"}, ""},
		{"metrics on localhost", []string{"--metrics-address", "localhost:9388"}, ""},
		{"metrics on all interfaces", []string{"--metrics-address", ":9388"}, `"metrics.address"`},
		{"metrics on a node IP", []string{"--metrics-address", "10.0.0.5:9388"}, `"metrics.address"`},
		{"metrics on a node IP, allowed", []string{"--metrics-address", "10.0.0.5:9388", "--metrics-allow-non-loopback"}, ""},
		{"metrics without port", []string{"--metrics-address", "127.0.0.1"}, `"metrics.address"`},
		{"metrics port 0", []string{"--metrics-address", "127.0.0.1:0"}, `"metrics.address"`},
		{"metrics port out of range", []string{"--metrics-address", "127.0.0.1:70000"}, `"metrics.address"`},
		{"pprof on loopback", []string{"--profile-address", "127.0.0.1:6060"}, ""},
		{"pprof elsewhere, even if metrics may", []string{"--profile-address", "0.0.0.0:6060", "--metrics-allow-non-loopback"}, `"profile_address"`},
		{"pprof on a node IP", []string{"--profile-address", "10.0.0.5:6060"}, `"profile_address"`},
		{"pprof on a unix socket", []string{"--profile-address", "/run/minicri/debug.sock"}, ""},
		{"pprof on a relative path", []string{"--profile-address", "debug.sock"}, `"profile_address"`},
		{"pprof on a unix socket path too long", []string{"--profile-address", "/" + strings.Repeat("d", 107)}, `"profile_address"`},
		{"tracing to a collector on the node", []string{"--tracing-endpoint", "127.0.0.1:4317"}, ""},
		{"tracing to a collector elsewhere", []string{"--tracing-endpoint", "otel-collector.monitoring:4317"}, ""},
		{"tracing without port", []string{"--tracing-endpoint", "127.0.0.1"}, `"tracing.endpoint"`},
		{"tracing as a URL", []string{"--tracing-endpoint", "http://127.0.0.1:4317"}, `"tracing.endpoint"`},
		{"tracing ratio 0", []string{"--tracing-sampling-ratio", "0"}, ""},
		{"tracing ratio half", []string{"--tracing-sampling-ratio", "0.5"}, ""},
		{"tracing ratio above 1", []string{"--tracing-sampling-ratio", "1.5"}, `"tracing.sampling_ratio"`},
		{"tracing ratio negative", []string{"--tracing-sampling-ratio", "-0.1"}, `"tracing.sampling_ratio"`},
		{"tracing ratio NaN", []string{"--tracing-sampling-ratio", "NaN"}, `"tracing.sampling_ratio"`},
		{"tracing ratio not a number", []string{"--tracing-sampling-ratio", "half"}, `"tracing.sampling_ratio"`},
		{"streaming waiting cap above the total", []string{"--streaming-max-connections", "10", "--streaming-max-waiting-connections", "11"}, `"streaming.max_waiting_connections"`},
		{"streaming waiting cap 0", []string{"--streaming-max-waiting-connections", "0"}, `"streaming.max_waiting_connections"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"--config", writeFile(t, "")}, c.args...)
			_, err := load(t, args...)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && err == nil:
				t.Fatalf("accepted, want an error naming %s", c.want)
			case c.want != "" && !strings.Contains(err.Error(), c.want):
				t.Fatalf("error %q does not name %s", err, c.want)
			}
		})
	}
}

// Profiles are on by default, on a root-only socket in the run dir, which
// moves with run_dir so that two daemons on their own run dirs never share
// one; an explicit value, "" included, is kept.
func TestProfileSocketDefaultFollowsTheRunDir(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"default", nil, "/run/minicri/debug.sock"},
		{"run dir moved", []string{"--run-dir", "/run/other"}, "/run/other/debug.sock"},
		{"turned off", []string{"--run-dir", "/run/other", "--profile-address", ""}, ""},
		{"on loopback", []string{"--run-dir", "/run/other", "--profile-address", "127.0.0.1:6060"}, "127.0.0.1:6060"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := load(t, append([]string{"--config", writeFile(t, "")}, c.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.ProfileAddress != c.want {
				t.Fatalf("profile_address = %q, want %q", cfg.ProfileAddress, c.want)
			}
		})
	}
}
