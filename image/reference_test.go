package image

import (
	"errors"
	"strings"
	"testing"
)

// Validation (what the server lets through) and pull (what parseReference
// accepts) apply one grammar: a reference one accepts, the other does too.
func TestValidateReferenceAgreesWithPull(t *testing.T) {
	for _, tc := range []struct {
		ref  string
		ok   bool
		isID bool // an image ID or a prefix of one: never pulled
	}{
		{ref: "busybox", ok: true},
		{ref: "busybox:1.36", ok: true},
		{ref: "library/busybox:latest", ok: true},
		{ref: "docker.io/library/busybox", ok: true},
		{ref: "127.0.0.1:5000/e2e/busybox:latest", ok: true},
		{ref: "localhost/app_x/a__b/c-d--e:v1.2-3", ok: true},
		{ref: "registry.k8s.io/pause@sha256:" + strings.Repeat("ab", 32), ok: true},
		{ref: "registry.k8s.io/pause:3.9@sha256:" + strings.Repeat("ab", 32), ok: true},
		{ref: "[::1]:5000/x", ok: true},
		{ref: "sha256:" + strings.Repeat("0f", 32), ok: true, isID: true},
		{ref: "0f0f0f", ok: true, isID: true},
		{ref: ""},
		{ref: " busybox"},
		{ref: "../../etc/passwd"},
		{ref: "/etc/passwd"},
		{ref: "registry.local/../../x:latest"},
		{ref: "127.0.0.1:5000/a//b"},
		{ref: "a/b@sha256:../../x"},
		{ref: "busybox@sha256:short"},
		{ref: "busybox@sha512:" + strings.Repeat("ab", 64)}, // only sha256 is pulled
		{ref: "busybox:../x"},
		{ref: "Busybox"},
		{ref: "busybox\nx"},
		{ref: "bad_host.example:x/y"},
		{ref: "x/" + strings.Repeat("a", 5000)},
	} {
		err := ValidateReference(tc.ref)
		if (err == nil) != tc.ok {
			t.Errorf("ValidateReference(%.40q) = %v, want ok=%v", tc.ref, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidReference) {
			t.Errorf("ValidateReference(%.40q) = %v, want ErrInvalidReference", tc.ref, err)
		}
		if tc.isID {
			continue
		}
		if _, perr := parseReference(tc.ref); (perr == nil) != (err == nil) {
			t.Errorf("%.40q: validation says %v, pull's parser says %v", tc.ref, err, perr)
		}
	}
}

// Every spelling of a registry host is one: the one every lookup keyed by
// host sees. What cannot be made one is refused.
func TestCanonicalHost(t *testing.T) {
	for _, tc := range []struct{ host, want string }{
		{"reg.example", "reg.example"},
		{"REG.Example", "reg.example"},
		{"reg.example:05000", "reg.example:5000"},
		{"127.0.0.1:05000", "127.0.0.1:5000"},
		{"reg.example:443", "reg.example"},
		{"Reg.Example:00443", "reg.example"},
		{"LOCALHOST:5000", "localhost:5000"},
		{"localhost:443", "localhost"},
		{"[0:0::1]:05000", "[::1]:5000"},
		{"[::1]:443", "[::1]"},
		{"[FE80::1]", "[fe80::1]"},
		{"[::ffff:7f00:1]:05000", "127.0.0.1:5000"},
		{"reg:443", "reg:443"}, // without its port it would be a Docker Hub namespace
		{"127.0.0.1", "127.0.0.1"},
	} {
		got, err := canonicalHost(tc.host)
		if err != nil || got != tc.want {
			t.Errorf("canonicalHost(%q) = %q, %v; want %q", tc.host, got, err, tc.want)
		}
		if again, err := canonicalHost(got); err != nil || again != got {
			t.Errorf("canonicalHost(%q) = %q, %v; want it unchanged", got, again, err)
		}
	}
	for _, host := range []string{
		"127.1:5000", "127.000.000.001:5000", "2130706433:5000", "0x7f.0.0.1:5000", "127.0.0.01",
		"reg.example:0", "reg.example:000", "reg.example:65536", "reg.example:0000065536",
		"Reg", "[1.2.3.4]:5000", "[::1",
	} {
		if got, err := canonicalHost(host); err == nil {
			t.Errorf("canonicalHost(%q) = %q, want an error", host, got)
		}
	}
}

// A reference is normalised once, host included: its name in the store,
// and what resolves it, are the canonical spelling's.
func TestReferenceHostIsCanonical(t *testing.T) {
	for _, tc := range []struct{ ref, want string }{
		{"127.0.0.1:05000/team/app", "127.0.0.1:5000/team/app:latest"},
		{"REG.EXAMPLE/team/app:v1", "reg.example/team/app:v1"},
		{"Reg.Example:443/team/app:v1", "reg.example/team/app:v1"},
		{"DOCKER.IO/library/busybox", "docker.io/library/busybox:latest"},
		{"docker.io:443/library/busybox", "docker.io/library/busybox:latest"},
		{"[0::1]:05000/app@sha256:" + strings.Repeat("ab", 32), "[::1]:5000/app@sha256:" + strings.Repeat("ab", 32)},
	} {
		r, err := parseReference(tc.ref)
		if err != nil || r.String() != tc.want {
			t.Errorf("parseReference(%q) = %q, %v; want %q", tc.ref, r.String(), err, tc.want)
		}
		id, err := parseIdentity(tc.ref)
		if err != nil || !strings.HasPrefix(tc.want, id.String()) {
			t.Errorf("parseIdentity(%q) = %q, %v; want %q", tc.ref, id, err, tc.want)
		}
	}
	for _, ref := range []string{"127.1:5000/team/app", "127.0.0.1:0/app", "Reg/app", "2130706433:5000/app"} {
		err := ValidateReference(ref)
		if !errors.Is(err, ErrInvalidReference) || !strings.Contains(err.Error(), "registry host") {
			t.Errorf("ValidateReference(%q) = %v, want ErrInvalidReference naming the registry host", ref, err)
		}
	}
	images := []Image{{ID: "sha256:" + strings.Repeat("1", 64), RepoTags: []string{"127.0.0.1:5000/team/app:latest"}}}
	if img, err := resolve(images, "127.0.0.1:05000/team/app"); err != nil || img.ID != images[0].ID {
		t.Errorf("resolve by another spelling of the host: %v, %v", img, err)
	}
}
