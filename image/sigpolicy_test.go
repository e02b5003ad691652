package image

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	tim "github.com/minicri/minicri/test/testimage"
)

// writePolicy writes a policy file in dir and returns its path.
func writePolicy(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// keyFile writes a signing key's public half and returns its path.
func keyFile(t *testing.T, k *tim.SigningKey) string {
	t.Helper()
	return writePolicy(t, t.TempDir(), "key.pub", string(k.PublicPEM))
}

func TestLoadPolicyRefusesWhatItCannotCheck(t *testing.T) {
	key := keyFile(t, tim.NewSigningKey(t))
	tests := []struct {
		name, policy, want string // want "": loads
	}{
		{"accept anything", `{"default": [{"type": "insecureAcceptAnything"}]}`, ""},
		{"sigstore key", fmt.Sprintf(`{"default": [{"type": "reject"}], "transports": {"docker": {"r.io/app": [{"type": "sigstoreSigned", "keyPath": %q, "signedIdentity": {"type": "matchRepository"}}]}, "docker-daemon": {"": [{"type": "insecureAcceptAnything"}]}}}`, key), ""},
		{"no default", `{"transports": {"docker": {"": [{"type": "reject"}]}}}`, `"default" is missing`},
		{"not JSON", `{"default": [`, "unexpected EOF"},
		{"unknown key", `{"default": [{"type": "reject"}], "defaults": []}`, `unknown field "defaults"`},
		{"unknown type", `{"default": [{"type": "acceptIfSunny"}]}`, `unknown requirement type "acceptIfSunny"`},
		{"GPG", `{"default": [{"type": "signedBy", "keyType": "GPGKeys", "keyPath": "/k"}]}`, "not supported by minicri"},
		{"fulcio", `{"default": [{"type": "sigstoreSigned", "fulcio": {"caPath": "/ca"}}]}`, `"fulcio" is not supported`},
		{"rekor beside a key", fmt.Sprintf(`{"default": [{"type": "sigstoreSigned", "keyPath": %q, "rekorPublicKeyPath": "/r"}]}`, key), `"rekorPublicKeyPath" is not supported`},
		{"no key", `{"default": [{"type": "sigstoreSigned"}]}`, "exactly one of keyPath"},
		{"two key sources", fmt.Sprintf(`{"default": [{"type": "sigstoreSigned", "keyPath": %q, "keyPaths": [%q]}]}`, key, key), "exactly one of keyPath"},
		{"relative key path", `{"default": [{"type": "sigstoreSigned", "keyPath": "key.pub"}]}`, "not absolute"},
		{"missing key file", `{"default": [{"type": "sigstoreSigned", "keyPath": "/nonexistent/key.pub"}]}`, "no such file"},
		{"key data not a key", fmt.Sprintf(`{"default": [{"type": "sigstoreSigned", "keyData": %q}]}`, base64.StdEncoding.EncodeToString([]byte("hello"))), "PUBLIC KEY"},
		{"reject with a key", fmt.Sprintf(`{"default": [{"type": "reject", "keyPath": %q}]}`, key), "takes no other keys"},
		{"unknown identity", fmt.Sprintf(`{"default": [{"type": "sigstoreSigned", "keyPath": %q, "signedIdentity": {"type": "matchAnything"}}]}`, key), "unknown signedIdentity"},
		{"exactReference without tag", fmt.Sprintf(`{"default": [{"type": "sigstoreSigned", "keyPath": %q, "signedIdentity": {"type": "exactReference", "dockerReference": "r.io/app"}}]}`, key), "names a repository"},
		{"empty scope", `{"default": [{"type": "reject"}], "transports": {"docker": {"r.io": []}}}`, "no requirements"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadPolicy(writePolicy(t, t.TempDir(), "policy.json", tc.policy))
			if tc.want == "" && err != nil {
				t.Fatalf("loadPolicy: %v", err)
			}
			if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("loadPolicy: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestPolicyScopeOrder(t *testing.T) {
	policy := `{"default": [{"type": "reject"}], "transports": {"docker": {
		"r.example.com:5000/team/app:v1": [{"type": "insecureAcceptAnything"}],
		"r.example.com:5000/team/app": [{"type": "insecureAcceptAnything"}],
		"r.example.com:5000/team": [{"type": "insecureAcceptAnything"}],
		"r.example.com:5000": [{"type": "insecureAcceptAnything"}],
		"*.example.com": [{"type": "insecureAcceptAnything"}],
		"docker.io/library/busybox": [{"type": "insecureAcceptAnything"}]}}}`
	p, err := loadPolicy(writePolicy(t, t.TempDir(), "policy.json", policy))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ ref, scope string }{
		{"r.example.com:5000/team/app:v1", `transports.docker."r.example.com:5000/team/app:v1"`},
		{"r.example.com:5000/team/app:v2", `transports.docker."r.example.com:5000/team/app"`},
		{"r.example.com:5000/team/other:v1", `transports.docker."r.example.com:5000/team"`},
		{"r.example.com:5000/else:v1", `transports.docker."r.example.com:5000"`},
		{"q.example.com/app:v1", `transports.docker."*.example.com"`},
		{"busybox", `transports.docker."docker.io/library/busybox"`},
		{"r.example.org/app@sha256:" + strings.Repeat("a", 64), "default"},
		{"r.example.com/app:v1", `transports.docker."*.example.com"`}, // the host, port or not
	}
	for _, tc := range tests {
		named, err := parseReference(tc.ref)
		if err != nil {
			t.Fatal(err)
		}
		_, scope := p.requirementsFor(identity{repo: named.repo(), tag: named.tag, digest: named.digest})
		if scope != tc.scope {
			t.Errorf("%s: scope %s, want %s", tc.ref, scope, tc.scope)
		}
	}
}

func TestSignedIdentityMatches(t *testing.T) {
	digest := "sha256:" + strings.Repeat("d", 64)
	byTag := identity{repo: "r.io/team/app", tag: "v1"}
	byDigest := identity{repo: "r.io/team/app", digest: digest}
	ref := func(s string) identity {
		id, err := parseIdentity(s)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	tests := []struct {
		rule   identityRule
		img    identity
		signed string
		want   bool
	}{
		{identityRule{kind: "matchRepoDigestOrExact"}, byTag, "r.io/team/app:v1", true},
		{identityRule{kind: "matchRepoDigestOrExact"}, byTag, "r.io/team/app:v2", false},
		{identityRule{kind: "matchRepoDigestOrExact"}, byTag, "r.io/team/app", false}, // cosign's repository-only identity
		{identityRule{kind: "matchRepoDigestOrExact"}, byTag, "r.io/team/other:v1", false},
		{identityRule{kind: "matchRepoDigestOrExact"}, byDigest, "r.io/team/app:any", true},
		{identityRule{kind: "matchRepoDigestOrExact"}, byDigest, "r.io/evil/app:any", false},
		{identityRule{kind: "matchExact"}, byTag, "r.io/team/app:v1", true},
		{identityRule{kind: "matchExact"}, byDigest, "r.io/team/app:v1", false},
		{identityRule{kind: "matchRepository"}, byTag, "r.io/team/app", true},
		{identityRule{kind: "matchRepository"}, byTag, "r.io/team/apps", false},
		{identityRule{kind: "exactReference", reference: ref("r.io/golden/app:1")}, byTag, "r.io/golden/app:1", true},
		{identityRule{kind: "exactReference", reference: ref("r.io/golden/app:1")}, byTag, "r.io/team/app:v1", false},
		{identityRule{kind: "exactRepository", reference: ref("r.io/golden/app")}, byTag, "r.io/golden/app:7", true},
		{identityRule{kind: "remapIdentity", prefix: "r.io/team", signedTo: "upstream.io/team"}, byTag, "upstream.io/team/app:v1", true},
		{identityRule{kind: "remapIdentity", prefix: "r.io/team", signedTo: "upstream.io/team"}, byTag, "r.io/team/app:v1", false},
		{identityRule{kind: "matchRepository"}, identity{repo: "docker.io/library/busybox", tag: "latest"}, "busybox", true}, // normalised
		{identityRule{kind: "matchRepository"}, byTag, "Not A Ref", false},
	}
	for _, tc := range tests {
		if got := tc.rule.matches(tc.img, tc.signed); got != tc.want {
			t.Errorf("%s: image %s, signed %q: %v, want %v", tc.rule.kind, tc.img, tc.signed, got, tc.want)
		}
	}
}

// TestJudgeSignatures: what a sigstoreSigned requirement accepts, the
// attacks among them: a signature replayed from another image (digest),
// one naming another repository, one by another key, a payload changed
// after signing.
func TestJudgeSignatures(t *testing.T) {
	key, other := tim.NewSigningKey(t), tim.NewSigningKey(t)
	digest := "sha256:" + strings.Repeat("a", 64)
	elsewhere := "sha256:" + strings.Repeat("b", 64)
	img := identity{repo: "r.io/app", tag: "v1"}
	policy := fmt.Sprintf(`{"default": [{"type": "sigstoreSigned", "keyPath": %q}]}`, keyFile(t, key))
	p, err := loadPolicy(writePolicy(t, t.TempDir(), "p.json", policy))
	if err != nil {
		t.Fatal(err)
	}
	sig := func(k *tim.SigningKey, ident, d string) cosignSignature {
		s := k.Sign(t, ident, d)
		return cosignSignature{payload: s.Payload, signature: s.Signature, where: "tag x.sig"}
	}
	tampered := sig(key, "r.io/app:v1", elsewhere)
	tampered.payload = tim.Payload("r.io/app:v1", digest) // the digest edited after signing
	tests := []struct {
		name string
		sigs []cosignSignature
		want string // "": accepted
	}{
		{"signed", []cosignSignature{sig(key, "r.io/app:v1", digest)}, ""},
		{"one good among bad", []cosignSignature{sig(other, "r.io/app:v1", digest), sig(key, "r.io/app:v1", digest)}, ""},
		{"unsigned", nil, "no signature exists"},
		{"another key", []cosignSignature{sig(other, "r.io/app:v1", digest)}, "not signed by a key of the policy"},
		{"replayed from another image", []cosignSignature{sig(key, "r.io/app:v1", elsewhere)}, "signed for manifest " + elsewhere},
		{"another repository", []cosignSignature{sig(key, "r.io/evil:v1", digest)}, `signed for "r.io/evil:v1"`},
		{"repository only, pulled by tag", []cosignSignature{sig(key, "r.io/app", digest)}, "matchRepoDigestOrExact does not accept"},
		{"payload changed after signing", []cosignSignature{tampered}, "not signed by a key"},
		{"no annotation", []cosignSignature{{payload: tim.Payload("r.io/app:v1", digest), where: "tag x.sig"}}, "no dev.cosignproject.cosign/signature annotation"},
		{"several bad", []cosignSignature{sig(other, "r.io/app:v1", digest), sig(key, "r.io/app:v1", elsewhere)}, "none of the 2 signatures was accepted"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The same signatures as cosign's .sig tag holds them, and as
			// referrers: the second stage is asked only when the first fails.
			for _, stage := range []string{"tag", "referrers"} {
				tagCalls, refCalls := 0, 0
				src := signatureSource{
					tagged:   func() ([]cosignSignature, error) { tagCalls++; return nil, nil },
					referred: func() ([]cosignSignature, error) { refCalls++; return tc.sigs, nil },
				}
				if stage == "tag" {
					src.tagged = func() ([]cosignSignature, error) { tagCalls++; return tc.sigs, nil }
					src.referred = func() ([]cosignSignature, error) { refCalls++; return nil, nil }
				}
				err := judge(p.def, img, digest, src)
				if tc.want == "" && err != nil {
					t.Fatalf("%s: judge: %v, want accepted", stage, err)
				}
				if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
					t.Fatalf("%s: judge: %v, want a refusal containing %q", stage, err, tc.want)
				}
				wantRef := 1
				if stage == "tag" && tc.want == "" {
					wantRef = 0 // accepted by the tag's: no referrers lookup
				}
				if tagCalls != 1 || refCalls != wantRef {
					t.Fatalf("%s: tag signatures fetched %d times, referrers %d; want 1, %d", stage, tagCalls, refCalls, wantRef)
				}
			}
		})
	}
	// reject and insecureAcceptAnything never look for signatures.
	for kind, want := range map[string]bool{"reject": false, "insecureAcceptAnything": true} {
		never := func() ([]cosignSignature, error) {
			t.Fatalf("%s fetched signatures", kind)
			return nil, nil
		}
		err := judge([]requirement{{kind: kind}}, img, digest, signatureSource{never, never})
		if (err == nil) != want {
			t.Errorf("%s: %v", kind, err)
		}
	}
}

// TestPolicyFileForNamespace: a namespace picks DIR/NS.json only when it
// is a DNS-1123 label; no name a pod sends reaches a file outside DIR.
func TestPolicyFileForNamespace(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "policies")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writePolicy(t, dir, "team-a.json", "{}")
	writePolicy(t, root, "x.json", "{}")                                // what ../x would reach
	writePolicy(t, dir, "Team-A.json", "{}")                            // not a label
	if err := os.MkdirAll(filepath.Join(dir, "a"), 0o755); err != nil { // a/b.json
		t.Fatal(err)
	}
	writePolicy(t, filepath.Join(dir, "a"), "b.json", "{}")
	global := "/etc/minicri/policy.json"
	tests := []struct {
		ns, want string
		invalid  bool
	}{
		{"team-a", filepath.Join(dir, "team-a.json"), false},
		{"team-b", global, false}, // no file of its own
		{"", global, false},
		{"../x", "", true},
		{"../../etc/x", "", true},
		{"a/b", "", true},
		{"Team-A", "", true},
		{".", "", true},
		{"team-a\x00", "", true},
		{strings.Repeat("a", 64), "", true},
	}
	for _, tc := range tests {
		got, err := policyFileFor(global, dir, tc.ns)
		if tc.invalid {
			if err == nil || !errors.Is(err, ErrInvalidReference) {
				t.Errorf("namespace %q: %q, %v; want refused as invalid", tc.ns, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("namespace %q: %q, %v; want %q", tc.ns, got, err, tc.want)
		}
	}
	if got, err := policyFileFor("", "", "team-a"); got != "" || err != nil {
		t.Errorf("no policy configured: %q, %v; want none", got, err)
	}
}

func TestValidNamespace(t *testing.T) {
	for ns, want := range map[string]bool{
		"default": true, "kube-system": true, "a": true, "0a": true, strings.Repeat("a", 63): true,
		"": false, "-a": false, "a-": false, "A": false, "a_b": false, "a.b": false, "..": false,
		"a/b": false, "../x": false, strings.Repeat("a", 64): false, "a\x00": false, "é": false,
	} {
		if got := ValidNamespace(ns); got != want {
			t.Errorf("ValidNamespace(%q) = %v, want %v", ns, got, want)
		}
	}
}

// A scope judges every spelling of its registry's host, and is written in
// any: a leading zero in the port, an upper-case host or an explicit :443
// escapes no scope. Two scopes of one spelling are refused.
func TestPolicyScopeHostIsCanonical(t *testing.T) {
	policy := `{"default": [{"type": "insecureAcceptAnything"}], "transports": {"docker": {
		"127.0.0.1:5000/team": [{"type": "reject"}],
		"REG.Example:0443/team": [{"type": "reject"}],
		"*.Corp.Example": [{"type": "reject"}]}}}`
	p, err := loadPolicy(writePolicy(t, t.TempDir(), "policy.json", policy))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ ref, scope string }{
		{"127.0.0.1:05000/team/app", `transports.docker."127.0.0.1:5000/team"`},
		{"127.0.0.1:5000/team/app", `transports.docker."127.0.0.1:5000/team"`},
		{"reg.example/team/app", `transports.docker."reg.example/team"`},
		{"REG.EXAMPLE:443/team/app", `transports.docker."reg.example/team"`},
		{"Registry.CORP.example/app", `transports.docker."*.corp.example"`},
		{"127.0.0.1:5001/team/app", "default"},
	} {
		img, err := parseIdentity(tc.ref)
		if err != nil {
			t.Fatal(err)
		}
		if _, scope := p.requirementsFor(img); scope != tc.scope {
			t.Errorf("%s: scope %s, want %s", tc.ref, scope, tc.scope)
		}
	}
	dup := `{"default": [{"type": "reject"}], "transports": {"docker": {
		"reg.example/team": [{"type": "reject"}], "REG.EXAMPLE:443/team": [{"type": "insecureAcceptAnything"}]}}}`
	if _, err := loadPolicy(writePolicy(t, t.TempDir(), "policy.json", dup)); err == nil || !strings.Contains(err.Error(), "reg.example/team") {
		t.Errorf("two scopes of one registry: %v, want an error naming it", err)
	}
	bad := `{"default": [{"type": "reject"}], "transports": {"docker": {"127.1:5000/team": [{"type": "reject"}]}}}`
	if _, err := loadPolicy(writePolicy(t, t.TempDir(), "policy.json", bad)); err == nil || !strings.Contains(err.Error(), "127.1:5000") {
		t.Errorf("a scope of a host with no one spelling: %v, want an error naming it", err)
	}
}
