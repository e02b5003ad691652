package oci

import (
	"fmt"
	"strings"
)

// DefaultPath is the PATH a container gets when neither its image nor its
// config sets one.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// ResolveArgs applies the kubelet's rules for the process's command line: a
// command replaces the image's entrypoint and cmd; args alone replace only the
// cmd; with neither, the image's entrypoint and cmd run. An empty result is
// ErrNoCommand.
func ResolveArgs(imageEntrypoint, imageCmd, command, args []string) ([]string, error) {
	var out []string
	switch {
	case len(command) > 0:
		out = concat(command, args)
	case len(args) > 0:
		out = concat(imageEntrypoint, args)
	default:
		out = concat(imageEntrypoint, imageCmd)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: neither the container config nor the image gives one", ErrNoCommand)
	}
	return out, nil
}

func concat(a, b []string) []string {
	out := make([]string, 0, len(a)+len(b))
	return append(append(out, a...), b...)
}

// MergeEnv returns the image's environment with the container's variables
// applied over it: a container variable replaces the image's of the same name in
// place, new ones follow in their order. PATH is added first when neither sets
// it, as image builders assume a default PATH.
func MergeEnv(imageEnv []string, env []KeyValue) []string {
	out := make([]string, 0, len(imageEnv)+len(env)+1)
	index := make(map[string]int, cap(out))
	set := func(key, entry string) {
		if i, ok := index[key]; ok {
			out[i] = entry
			return
		}
		index[key] = len(out)
		out = append(out, entry)
	}
	for _, e := range imageEnv {
		set(envKey(e), e)
	}
	for _, kv := range env {
		set(kv.Key, kv.Key+"="+kv.Value)
	}
	if _, ok := index["PATH"]; !ok {
		out = append([]string{"PATH=" + DefaultPath}, out...)
	}
	return out
}

func envKey(entry string) string {
	key, _, _ := strings.Cut(entry, "=")
	return key
}

// withDefaultEnv adds key=value unless env sets key already.
func withDefaultEnv(env []string, key, value string) []string {
	for _, e := range env {
		if envKey(e) == key {
			return env
		}
	}
	return append(env, key+"="+value)
}
