//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// benchPulls is how many pulls each side of the signature policy bench makes.
const benchPulls = 15

// benchSignaturePolicy pairs a pull-and-unpack of a signed busybox image
// judged by a sigstoreSigned policy (namespace "signed", whose
// signature_policy_dir file requires the key) against the same pull with
// no policy (namespace "open", which has none), interleaved so that both
// sides see the same load. The image is removed after each pull, so that
// every pull downloads and unpacks it again.
func benchSignaturePolicy(t *testing.T) {
	s := pushSignedImages(t)
	nsDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(nsDir, "signed.json"), []byte(s.sigstorePolicy(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	d := StartDaemon(t, WithConfig(fmt.Sprintf("[image]\nsignature_policy_dir = %q\n", nsDir)))
	pullOnce := func(ns string) time.Duration {
		begin := time.Now()
		if _, err := d.pullFor(s.signed.ref, ns); err != nil {
			t.Fatalf("pull for namespace %s: %v", ns, err)
		}
		took := time.Since(begin)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := d.Images.RemoveImage(ctx, &runtime.ImageSpec{Image: s.signed.ref}); err != nil {
			t.Fatal(err)
		}
		return took
	}
	pullOnce("open") // warm the connections and the registry's caches
	var on, off []time.Duration
	for i := 0; i < benchPulls; i++ {
		off = append(off, pullOnce("open"))
		on = append(on, pullOnce("signed"))
	}
	addBenchRow(benchRow{measure: "pull + unpack busybox, signature policy on, p50", value: ms(p50(on)), floor: ms(p50(off)), unit: "ms", goal: "within 5% of off (the floor), or explained"})
}

// benchCreates is how many creates each side of the create bench makes.
const benchCreates = 30

// benchCreatePolicy pairs CreateContainer in a namespace whose
// signature_policy_dir file requires the key's signature (judged at every
// create: the policy's files read, the admission cached) against the same
// create on a daemon with no policy at all, interleaved so that both sides
// see the same load. Each create is removed before the next.
func benchCreatePolicy(t *testing.T) {
	s := pushSignedImages(t)
	nsDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(nsDir, "signed.json"), []byte(s.sigstorePolicy(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	on := StartDaemon(t, WithConfig(fmt.Sprintf("[image]\nsignature_policy_dir = %q\n", nsDir)))
	off := StartDaemon(t)
	type side struct {
		d      *Daemon
		pod    string
		podCfg *runtime.PodSandboxConfig
		took   []time.Duration
	}
	sides := []*side{{d: off}, {d: on}}
	for _, sd := range sides {
		if _, err := sd.d.pullFor(s.signed.ref, "signed"); err != nil {
			t.Fatal(err)
		}
		sd.pod, sd.podCfg = sd.d.policyPod(t, "signed")
	}
	createOnce := func(sd *side, i int) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		begin := time.Now()
		id, err := sd.d.createAs(sd.pod, sd.podCfg, fmt.Sprintf("c%d", i), s.signed.id, s.signed.ref)
		if err != nil {
			t.Fatalf("CreateContainer: %v", err)
		}
		sd.took = append(sd.took, time.Since(begin))
		if err := sd.d.Runtime.RemoveContainer(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	for _, sd := range sides {
		createOnce(sd, -1) // the first create of each: warm caches (and the admission's)
		sd.took = nil
	}
	for i := 0; i < benchCreates; i++ {
		for _, sd := range sides {
			createOnce(sd, i)
		}
	}
	addBenchRow(benchRow{measure: "CreateContainer, namespace signature policy on, p50", value: ms(p50(sides[1].took)), floor: ms(p50(sides[0].took)), unit: "ms", goal: "<= 1.05 x off (the floor: no policy)"})
}
