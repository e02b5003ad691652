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
