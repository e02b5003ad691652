//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/test/registry"
	"github.com/minicri/minicri/test/testimage"
)

// signedImages is a registry serving, in repository e2e/app, an image
// signed (cosign's format, ECDSA P-256) by key, an unsigned one, and one
// signed by another key.
type signedImages struct {
	reg                     *registry.Registry
	repo                    string // "127.0.0.1:PORT/e2e/app"
	key                     *testimage.SigningKey
	signed, unsigned, other pushedImage
}

func pushSignedImages(t *testing.T) *signedImages {
	t.Helper()
	s := &signedImages{reg: registry.Start(t, registry.Options{}), key: testimage.NewSigningKey(t)}
	s.repo = s.reg.Host() + "/e2e/app"
	s.signed = pushImage(t, s.reg, "app:signed", testimage.Busybox(t, testimage.WithEnv("IMAGE=signed")))
	s.unsigned = pushImage(t, s.reg, "app:unsigned", testimage.Busybox(t, testimage.WithEnv("IMAGE=unsigned")))
	s.other = pushImage(t, s.reg, "app:other", testimage.Busybox(t, testimage.WithEnv("IMAGE=other")))
	testimage.PushSignatures(t, s.repo, s.signed.digest, []testimage.Signature{s.key.Sign(t, s.repo, s.signed.digest)})
	testimage.PushSignatures(t, s.repo, s.other.digest, []testimage.Signature{testimage.NewSigningKey(t).Sign(t, s.repo, s.other.digest)})
	return s
}

// sigstorePolicy requires the key's signature for the repository (cosign
// signs the repository: matchRepository) and rejects everything else.
func (s *signedImages) sigstorePolicy(t *testing.T) string {
	keyPath := filepath.Join(t.TempDir(), "cosign.pub")
	if err := os.WriteFile(keyPath, s.key.PublicPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf(`{"default": [{"type": "reject"}], "transports": {"docker": {%q: [
		{"type": "sigstoreSigned", "keyPath": %q, "signedIdentity": {"type": "matchRepository"}}]}}}`, s.repo, keyPath)
}

// pullFor pulls ref for a pod of namespace ns, as the kubelet does.
func (d *Daemon) pullFor(ref, ns string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := d.podConfig("pull")
	cfg.Metadata.Namespace = ns
	return d.Images.PullImage(ctx, &runtime.ImageSpec{Image: ref}, nil, cfg)
}

// wantRefused checks a pull refused by the signature policy: the code,
// and a message naming the image, the scope and the reason.
func wantRefused(t *testing.T, what string, err error, ref, scope, reason string) {
	t.Helper()
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("%s: %v; want FailedPrecondition", what, err)
	}
	for _, s := range []string{ref, "scope " + scope, reason} {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("%s: %v; want the message to name %q", what, err, s)
		}
	}
}

// TestSignaturePolicyRefusesUnsignedImages: with a sigstoreSigned policy
// the signed image pulls and runs; the unsigned one and one signed by
// another key are refused with a clear error and leave no blob or layer.
func TestSignaturePolicyRefusesUnsignedImages(t *testing.T) {
	s := pushSignedImages(t)
	policy := filepath.Join(t.TempDir(), "policy.json")
	writeFile(t, policy, s.sigstorePolicy(t), 0o644)
	d := StartDaemon(t, WithConfig(fmt.Sprintf("[image]\nsignature_policy = %q\n", policy)))
	scope := fmt.Sprintf("transports.docker.%q", s.repo)

	_, err := d.pullErr(s.unsigned.ref, nil)
	wantRefused(t, "pull of the unsigned image", err, s.unsigned.ref, scope, "a signature was required, but no signature exists")
	_, err = d.pullErr(s.other.ref, nil)
	wantRefused(t, "pull of the image signed by another key", err, s.other.ref, scope, "not signed by a key of the policy")
	for _, dir := range []string{"image/blobs/sha256", "image/layers", "image/tmp"} {
		if left := filesBelow(t, filepath.Join(d.Root, dir)); len(left) != 0 {
			t.Fatalf("%s after the refused pulls: %v; want nothing", dir, left)
		}
	}
	if imgs := d.listImages(t, ""); len(imgs) != 0 {
		t.Fatalf("images after the refused pulls: %v", imageIDs(imgs))
	}

	if got := d.pull(t, s.signed.ref); got != s.signed.id {
		t.Fatalf("PullImage of the signed image = %s, want %s", got, s.signed.id)
	}
	podCfg := d.podConfig("signed")
	podCfg.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{NamespaceOptions: &runtime.NamespaceOption{Network: runtime.NamespaceMode_NODE}}
	pod := d.runPod(t, podCfg)
	id := d.startContainer(t, pod, podCfg, containerConfig("c", s.signed.ref, "sleep", "3600"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := d.Runtime.ContainerStatus(ctx, id, false)
	if err != nil || st.GetStatus().GetState() != runtime.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("container of the signed image: %v, %v; want running", st.GetStatus().GetState(), err)
	}
}

// TestSignaturePolicyPerNamespace: signature_policy_dir's NAMESPACE.json
// judges that namespace's pulls only; an edit to a policy file takes effect
// at the next pull, with the daemon's pid unchanged; a file that does not
// parse refuses, naming it; a namespace that walks up is refused.
func TestSignaturePolicyPerNamespace(t *testing.T) {
	s := pushSignedImages(t)
	dir := t.TempDir()
	nsDir := filepath.Join(dir, "namespaces")
	if err := os.Mkdir(nsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	policy := filepath.Join(dir, "policy.json")
	writeFile(t, policy, `{"default": [{"type": "insecureAcceptAnything"}]}`, 0o644)
	strict := filepath.Join(nsDir, "strict.json")
	writeFile(t, strict, s.sigstorePolicy(t), 0o644)
	writeFile(t, filepath.Join(dir, "x.json"), `{"default": [{"type": "insecureAcceptAnything"}]}`, 0o644) // what ../x would reach
	d := StartDaemon(t, WithConfig(fmt.Sprintf("[image]\nsignature_policy = %q\nsignature_policy_dir = %q\n", policy, nsDir)))
	pid := d.cmd.Process.Pid
	scope := fmt.Sprintf("transports.docker.%q", s.repo)

	_, err := d.pullFor(s.unsigned.ref, "strict")
	wantRefused(t, "pull of the unsigned image for namespace strict", err, s.unsigned.ref, scope, "no signature exists")
	if _, err := d.pullFor(s.unsigned.ref, "relaxed"); err != nil {
		t.Fatalf("pull of the unsigned image for namespace relaxed (the node's policy accepts anything): %v", err)
	}
	if _, err := d.pullFor(s.signed.ref, "strict"); err != nil {
		t.Fatalf("pull of the signed image for namespace strict: %v", err)
	}
	for _, ns := range []string{"../x", "../../etc/x", "a/b"} {
		if _, err := d.pullFor(s.unsigned.ref, ns); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "sandbox_config.metadata.namespace") {
			t.Fatalf("pull for namespace %q: %v; want InvalidArgument naming sandbox_config.metadata.namespace", ns, err)
		}
	}

	// The node's policy edited to reject: the next pull obeys, no SIGHUP.
	writeFile(t, policy, `{"default": [{"type": "reject"}]}`, 0o644)
	_, err = d.pullFor(s.other.ref, "relaxed")
	wantRefused(t, "pull after the edit to reject", err, s.other.ref, "default", "rejects every image")
	writeFile(t, policy, `{"default": [{"type": "insecureAcceptAnything"`, 0o644)
	if _, err := d.pullFor(s.other.ref, "relaxed"); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), policy) {
		t.Fatalf("pull under a policy that does not parse: %v; want FailedPrecondition naming %s", err, policy)
	}
	if d.cmd.Process.Pid != pid || d.cmd.ProcessState != nil {
		t.Fatalf("the daemon was restarted (pid %d, was %d)", d.cmd.Process.Pid, pid)
	}
}

// TestSignaturePolicyReloadOnSIGHUP: signature_policy set in the file and
// put in force by SIGHUP judges the next pull, and the next create of an
// image pulled before it, with the daemon's pid unchanged.
func TestSignaturePolicyReloadOnSIGHUP(t *testing.T) {
	s := pushSignedImages(t)
	policy := filepath.Join(t.TempDir(), "policy.json")
	writeFile(t, policy, s.sigstorePolicy(t), 0o644)
	d := StartDaemon(t, WithConfig("[image]\npull_timeout = \"5m\"\n"))
	configFile := filepath.Join(d.Dir, "minicri.toml")
	pid := d.cmd.Process.Pid
	if _, err := d.pullErr(s.unsigned.ref, nil); err != nil {
		t.Fatalf("pull of the unsigned image with no policy: %v", err)
	}
	podCfg := d.podConfig("running")
	podCfg.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{NamespaceOptions: &runtime.NamespaceOption{Network: runtime.NamespaceMode_NODE}}
	pod := d.runPod(t, podCfg)
	// A container of the image the new policy will refuse: what runs is
	// not judged again.
	id := d.startContainer(t, pod, podCfg, containerConfig("c", s.unsigned.ref, "sleep", "3600"))
	writeFile(t, configFile, fmt.Sprintf("[image]\npull_timeout = \"5m\"\nsignature_policy = %q\n", policy), 0o644)
	before := strings.Count(d.Output(), "SIGHUP: configuration reloaded")
	d.Signal(syscall.SIGHUP)
	waitFor(t, "the daemon to log the reload", 30*time.Second, func() bool {
		return strings.Count(d.Output(), "SIGHUP: configuration reloaded") > before
	})
	_, err := d.pullErr(s.other.ref, nil)
	wantRefused(t, "pull of the image signed by another key after the reload", err, s.other.ref, fmt.Sprintf("transports.docker.%q", s.repo), "not signed by a key of the policy")
	if got := d.pull(t, s.signed.ref); got != s.signed.id {
		t.Fatalf("PullImage of the signed image after the reload = %s, want %s", got, s.signed.id)
	}
	// The image pulled before the policy was in force is judged at its
	// next create, with no pull.
	_, err = d.createAs(pod, podCfg, "after-reload", s.unsigned.id, s.unsigned.ref)
	wantCreateRefused(t, "create of the unsigned image pulled before the reload", err, policy, s.unsigned.ref)
	if d.cmd.Process.Pid != pid || d.cmd.ProcessState != nil {
		t.Fatalf("the daemon was restarted (pid %d, was %d)", d.cmd.Process.Pid, pid)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := d.Runtime.ContainerStatus(ctx, id, false)
	if err != nil || st.GetStatus().GetState() != runtime.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("container started before the reload: %v, %v; want still running", st.GetStatus().GetState(), err)
	}
}
