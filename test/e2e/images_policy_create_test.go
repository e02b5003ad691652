//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// policyPod runs a pod of namespace ns on the host's network.
func (d *Daemon) policyPod(t *testing.T, ns string) (string, *runtime.PodSandboxConfig) {
	t.Helper()
	cfg := d.podConfig("policy-" + ns)
	cfg.Metadata.Namespace = ns
	cfg.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{NamespaceOptions: &runtime.NamespaceOption{Network: runtime.NamespaceMode_NODE}}
	return d.runPod(t, cfg), cfg
}

// createAs makes a container of image as the kubelet asks: by the image's
// ID, with the pod's name for it as user_specified_image.
func (d *Daemon) createAs(podID string, podCfg *runtime.PodSandboxConfig, name, id, ref string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := containerConfig(name, id, "sleep", "3600")
	cfg.Image.UserSpecifiedImage = ref
	return d.Runtime.CreateContainer(ctx, podID, cfg, podCfg)
}

// wantCreateRefused checks a create refused by a namespace's policy:
// FailedPrecondition naming the policy file and the image.
func wantCreateRefused(t *testing.T, what string, err error, file, ref string) {
	t.Helper()
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("%s: %v; want FailedPrecondition", what, err)
	}
	for _, s := range []string{file, ref} {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("%s: %v; want the message to name %q", what, err, s)
		}
	}
}

// keptSignatures lists the payload digests of the signatures the store
// keeps for an image (its verbose ImageStatus).
func (d *Daemon) keptSignatures(t *testing.T, ref string) []string {
	t.Helper()
	var info struct {
		Signatures []struct {
			Source     string
			Signatures []struct{ Payload string }
		}
	}
	if err := json.Unmarshal([]byte(d.imageStatus(t, ref, true).GetInfo()["info"]), &info); err != nil {
		t.Fatalf("ImageStatus info of %s: %v", ref, err)
	}
	var out []string
	for _, set := range info.Signatures {
		for _, s := range set.Signatures {
			out = append(out, s.Payload)
		}
	}
	return out
}

// TestNamespacePolicyJudgesCreateOfImagePulledElsewhere is the attack of
// issue 39 item 3: namespace strict's policy requires the key's signature,
// namespace other's admits anything. An unsigned image pulled for other is
// refused at create in strict (as the kubelet asks, by ID with the pod's
// name for it, and as crictl asks, by name or by ID alone), naming
// strict.json and the image; other's pods run it. A signed image pulled
// for other, whose signatures no pull looked up, is admitted in strict:
// they are fetched at create, and kept.
func TestNamespacePolicyJudgesCreateOfImagePulledElsewhere(t *testing.T) {
	s := pushSignedImages(t)
	nsDir := t.TempDir()
	strict := filepath.Join(nsDir, "strict.json")
	writeFile(t, strict, s.sigstorePolicy(t), 0o644)
	writeFile(t, filepath.Join(nsDir, "other.json"), `{"default": [{"type": "insecureAcceptAnything"}]}`, 0o644)
	d := StartDaemon(t, WithConfig(fmt.Sprintf("[image]\nsignature_policy_dir = %q\n", nsDir)))

	if _, err := d.pullFor(s.unsigned.ref, "strict"); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("pull of the unsigned image for strict: %v; want FailedPrecondition", err)
	}
	if _, err := d.pullFor(s.unsigned.ref, "other"); err != nil {
		t.Fatalf("pull of the unsigned image for other: %v", err)
	}
	strictPod, strictCfg := d.policyPod(t, "strict")
	_, err := d.createAs(strictPod, strictCfg, "kubelet", s.unsigned.id, s.unsigned.ref)
	wantCreateRefused(t, "create of the unsigned image in strict, as the kubelet asks", err, strict, s.unsigned.ref)
	_, err = d.createAs(strictPod, strictCfg, "byname", s.unsigned.ref, "")
	wantCreateRefused(t, "create of the unsigned image in strict, by name", err, strict, s.unsigned.ref)
	_, err = d.createAs(strictPod, strictCfg, "byid", s.unsigned.id, "")
	wantCreateRefused(t, "create of the unsigned image in strict, by ID", err, strict, s.repo+"@"+s.unsigned.digest)
	// A name the image does not have does not pick the scope it is judged by.
	_, err = d.createAs(strictPod, strictCfg, "alias", s.unsigned.id, "docker.io/library/busybox:latest")
	wantCreateRefused(t, "create of the unsigned image in strict under a name it does not have", err, strict, s.repo)
	if list, err := d.Runtime.ListContainers(context.Background(), nil); err != nil || len(list) != 0 {
		t.Fatalf("containers after the refused creates: %d (%v); want none", len(list), err)
	}
	otherPod, otherCfg := d.policyPod(t, "other")
	if _, err := d.createAs(otherPod, otherCfg, "c", s.unsigned.id, s.unsigned.ref); err != nil {
		t.Fatalf("create of the unsigned image in other: %v", err)
	}

	if _, err := d.pullFor(s.signed.ref, "other"); err != nil {
		t.Fatalf("pull of the signed image for other: %v", err)
	}
	if kept := d.keptSignatures(t, s.signed.ref); len(kept) != 0 {
		t.Fatalf("signatures kept by a pull no policy judged: %v; want none", kept)
	}
	if _, err := d.createAs(strictPod, strictCfg, "signed", s.signed.id, s.signed.ref); err != nil {
		t.Fatalf("create of the signed image in strict (its signature fetched at create): %v", err)
	}
	if kept := d.keptSignatures(t, s.signed.ref); len(kept) != 1 {
		t.Fatalf("signatures kept after the create fetched them: %v; want 1", kept)
	}
}

// TestNamespacePolicyKeepsSignatures: a pull judged by a namespace's
// policy keeps the signatures it verified, their payloads blobs of the
// store; a create in that namespace then needs no registry (it is
// stopped); removing the image removes them. A signed image whose
// signatures no pull looked up is refused when the registry cannot be
// asked, naming the policy file and the image.
func TestNamespacePolicyKeepsSignatures(t *testing.T) {
	s := pushSignedImages(t)
	nsDir := t.TempDir()
	strict := filepath.Join(nsDir, "strict.json")
	writeFile(t, strict, s.sigstorePolicy(t), 0o644)
	d := StartDaemon(t, WithConfig(fmt.Sprintf("[image]\nsignature_policy_dir = %q\n", nsDir)))
	if _, err := d.pullFor(s.signed.ref, "strict"); err != nil {
		t.Fatalf("pull of the signed image for strict: %v", err)
	}
	kept := d.keptSignatures(t, s.signed.ref)
	if len(kept) != 1 {
		t.Fatalf("signatures kept by the pull: %v; want 1", kept)
	}
	payload := filepath.Join(d.Root, "image/blobs/sha256", strings.TrimPrefix(kept[0], "sha256:"))
	if _, err := os.Stat(payload); err != nil {
		t.Fatalf("the kept signature's payload is not in the content store: %v", err)
	}
	if _, err := d.pullFor(s.other.ref, "relaxed"); err != nil { // no policy for relaxed
		t.Fatalf("pull of the image signed by another key for relaxed: %v", err)
	}

	s.reg.Stop()
	pod, podCfg := d.policyPod(t, "strict")
	id, err := d.createAs(pod, podCfg, "offline", s.signed.id, s.signed.ref)
	if err != nil {
		t.Fatalf("create of the signed image in strict with the registry stopped: %v", err)
	}
	_, err = d.createAs(pod, podCfg, "unreachable", s.other.id, s.other.ref)
	wantCreateRefused(t, "create of an image whose signatures cannot be fetched", err, strict, s.other.ref)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := d.Runtime.RemoveContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := d.Images.RemoveImage(ctx, &runtime.ImageSpec{Image: s.signed.id}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(payload); !os.IsNotExist(err) {
		t.Fatalf("the signature's payload after RemoveImage: %v; want it gone", err)
	}
}

// TestNamespacePolicyJudgesImagesPulledBeforeIt: an image pulled when its
// namespace had no policy file runs there; once the file appears (no
// reload, no pull) a create in that namespace is refused, naming it; once
// it goes, admitted again.
func TestNamespacePolicyJudgesImagesPulledBeforeIt(t *testing.T) {
	s := pushSignedImages(t)
	nsDir := t.TempDir()
	d := StartDaemon(t, WithConfig(fmt.Sprintf("[image]\nsignature_policy_dir = %q\n", nsDir)))
	if _, err := d.pullFor(s.unsigned.ref, "late"); err != nil {
		t.Fatalf("pull with no policy: %v", err)
	}
	pod, podCfg := d.policyPod(t, "late")
	if _, err := d.createAs(pod, podCfg, "before", s.unsigned.id, s.unsigned.ref); err != nil {
		t.Fatalf("create with no policy: %v", err)
	}
	late := filepath.Join(nsDir, "late.json")
	writeFile(t, late, s.sigstorePolicy(t), 0o644)
	_, err := d.createAs(pod, podCfg, "after", s.unsigned.id, s.unsigned.ref)
	wantCreateRefused(t, "create once late.json is in force", err, late, s.unsigned.ref)
	if err := os.Remove(late); err != nil {
		t.Fatal(err)
	}
	if _, err := d.createAs(pod, podCfg, "again", s.unsigned.id, s.unsigned.ref); err != nil {
		t.Fatalf("create once late.json is gone: %v", err)
	}
}
