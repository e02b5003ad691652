package runcflags

import (
	"slices"
	"testing"
)

func TestGlobalArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		g    Global
		want []string
	}{
		{"none", Global{}, nil},
		{"daemon call", Global{Root: "/run/x", SystemdCgroup: true, Log: "/b/runtime.log", LogJSON: true},
			[]string{"--root", "/run/x", "--systemd-cgroup", "--log", "/b/runtime.log", "--log-format", "json"}},
		{"monitor create", Global{Root: "/run/x", Extra: []string{"--systemd-cgroup"}, Log: "/b/runtime.log"},
			[]string{"--root", "/run/x", "--systemd-cgroup", "--log", "/b/runtime.log"}},
		{"format without log is dropped", Global{LogJSON: true}, nil},
	} {
		if got := tc.g.Args(); !slices.Equal(got, tc.want) {
			t.Errorf("%s: args = %q, want %q", tc.name, got, tc.want)
		}
	}
}
