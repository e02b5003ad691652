package image

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tim "github.com/minicri/minicri/test/testimage"
)

// strictStore is a store whose namespace "strict" has the registry's
// sigstoreSigned policy and every other namespace none.
func strictStore(t *testing.T, r *signedRegistry) (s *Store, strictFile string) {
	dir := t.TempDir()
	strictFile = r.policy(t, dir)
	if err := os.Rename(strictFile, filepath.Join(dir, "strict.json")); err != nil {
		t.Fatal(err)
	}
	return newTestStore(t, Options{SignaturePolicyDir: dir}), filepath.Join(dir, "strict.json")
}

func wantAdmitRefused(t *testing.T, what string, err error, file, ref string) {
	t.Helper()
	var perr *PolicyError
	if !errors.As(err, &perr) || !errors.Is(err, ErrSignatureRefused) || perr.File != file || !strings.Contains(err.Error(), ref) {
		t.Fatalf("%s: %v; want a *PolicyError of %s naming %s", what, err, file, ref)
	}
}

// TestAdmitJudgesAnImageAnotherNamespacePulled: an unsigned image pulled
// for a namespace with no policy is refused at create in one whose policy
// requires a signature, by its name or by its ID alone; the signed one,
// pulled there too, is admitted.
func TestAdmitJudgesAnImageAnotherNamespacePulled(t *testing.T) {
	r := startSignedRegistry(t)
	s, strict := strictStore(t, r)
	ctx := testContext(t)
	unsigned, err := s.PullForNamespace(ctx, r.repo+":unsigned", nil, "other")
	if err != nil {
		t.Fatalf("pull of the unsigned image for namespace other: %v", err)
	}
	if err := s.Admit(ctx, unsigned, r.repo+":unsigned", "other"); err != nil {
		t.Fatalf("Admit for namespace other, which has no policy: %v", err)
	}
	wantAdmitRefused(t, "Admit of the unsigned image for strict", s.Admit(ctx, unsigned, r.repo+":unsigned", "strict"), strict, r.repo+":unsigned")
	wantAdmitRefused(t, "Admit of the unsigned image by ID for strict", s.Admit(ctx, unsigned, unsigned.ID, "strict"), strict, r.repo+"@"+r.unsigned.digest)
	// A name the image does not have in the store is not the one judged.
	wantAdmitRefused(t, "Admit of the unsigned image under another name", s.Admit(ctx, unsigned, "docker.io/library/busybox:latest", "strict"), strict, r.repo)

	signed, err := s.PullForNamespace(ctx, r.repo+":signed", nil, "other")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.FsInfo(); err != nil { // writes the measure kept for the next start: one inode
		t.Fatal(err)
	}
	s.invalidateUsage()
	before, err := s.FsInfo()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Admit(ctx, signed, r.repo+":signed", "strict"); err != nil {
		t.Fatalf("Admit of the signed image for strict (its signature fetched at create): %v", err)
	}
	// The payload kept is content of the store, as ImageFsInfo reports it.
	if after, err := s.FsInfo(); err != nil || after.InodesUsed != before.InodesUsed+1 {
		t.Fatalf("FsInfo after the create kept a signature: %d inodes (%v), before %d; want one more", after.InodesUsed, err, before.InodesUsed)
	}
	kept, err := s.Get(signed.ID)
	if err != nil {
		t.Fatal(err)
	}
	set, ok := findSignatureSet(kept.Signatures, r.repo, r.signed.digest, sourceTag)
	if !ok || len(set.Signatures) != 1 || !blobExists(s, set.Signatures[0].Payload) {
		t.Fatalf("signatures kept after the create's fetch: %+v; want the tag's one signature, its payload in the store", kept.Signatures)
	}
}

// TestAdmitIsOfflineForKeptSignatures: a pull judged by the policy keeps
// the signatures it verified (their payloads are blobs of the store); a
// create then needs no registry; removing the image removes them.
func TestAdmitIsOfflineForKeptSignatures(t *testing.T) {
	r := startSignedRegistry(t)
	s, _ := strictStore(t, r)
	ctx := testContext(t)
	img, err := s.PullForNamespace(ctx, r.repo+":signed", nil, "strict")
	if err != nil {
		t.Fatal(err)
	}
	set, ok := findSignatureSet(img.Signatures, r.repo, r.signed.digest, sourceTag)
	if !ok || len(set.Signatures) != 1 {
		t.Fatalf("signatures kept by the pull: %+v; want the tag's one", img.Signatures)
	}
	payload := set.Signatures[0].Payload
	if !blobExists(s, payload) {
		t.Fatalf("payload %s is not in the store", payload)
	}
	r.px.srv.Close() // the registry is gone
	if err := s.Admit(ctx, img, img.ID, "strict"); err != nil {
		t.Fatalf("Admit with the registry gone: %v", err)
	}
	s.policies = policyCache{} // no admission cached: judged from the kept signature
	if err := s.Admit(ctx, img, r.repo+":signed", "strict"); err != nil {
		t.Fatalf("Admit with the registry gone, nothing cached: %v", err)
	}
	if err := s.Remove(img.ID); err != nil {
		t.Fatal(err)
	}
	if blobExists(s, payload) {
		t.Fatalf("payload %s left after the image's removal", payload)
	}
}

// TestAdmitJudgesImagesPulledBeforeThePolicy: an image pulled with no
// policy is admitted until a policy file for the namespace appears, then
// refused, then admitted again when the file goes.
func TestAdmitJudgesImagesPulledBeforeThePolicy(t *testing.T) {
	r := startSignedRegistry(t)
	dir := t.TempDir()
	s := newTestStore(t, Options{SignaturePolicyDir: dir})
	ctx := testContext(t)
	img, err := s.PullForNamespace(ctx, r.repo+":unsigned", nil, "late")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Admit(ctx, img, r.repo+":unsigned", "late"); err != nil {
		t.Fatalf("Admit with no policy file: %v", err)
	}
	file := filepath.Join(dir, "late.json")
	writePolicy(t, dir, "late.json", `{"default": [{"type": "reject"}]}`)
	wantAdmitRefused(t, "Admit once late.json rejects", s.Admit(ctx, img, r.repo+":unsigned", "late"), file, r.repo+":unsigned")
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := s.Admit(ctx, img, r.repo+":unsigned", "late"); err != nil {
		t.Fatalf("Admit once late.json is gone: %v", err)
	}
}

// TestPolicyCacheInvalidation: a cached policy and the admissions made
// under it hold while the policy file and its key files keep their
// contents, and not after any of them changes, even to a file of the same
// size or back to its contents.
func TestPolicyCacheInvalidation(t *testing.T) {
	dir := t.TempDir()
	key := keyFile(t, tim.NewSigningKey(t))
	accept := `{"default": [{"type": "insecureAcceptAnything"}], "transports": {"docker": {"r.example/a": [{"type": "sigstoreSigned", "keyPath": "` + key + `"}]}}}`
	file := writePolicy(t, dir, "p.json", accept)
	var c policyCache
	first, err := c.current(file)
	if err != nil {
		t.Fatal(err)
	}
	a := admission{file: file, imageID: "sha256:1", ref: "r.example/b:1"}
	c.admit(a, first)
	if again, err := c.current(file); err != nil || again != first || !c.isAdmitted(a, again) {
		t.Fatalf("unchanged files: parsed again (%v) or admission lost", err)
	}
	if c.isAdmitted(admission{file: file, imageID: "sha256:other", ref: a.ref}, first) {
		t.Fatal("another image is admitted by the cache")
	}

	steps := []struct {
		name string
		do   func()
	}{
		{"policy edited, same size", func() { writePolicy(t, dir, "p.json", strings.Replace(accept, "r.example/a", "r.example/c", 1)) }},
		{"policy back to its first contents", func() { writePolicy(t, dir, "p.json", accept) }},
		{"key file replaced", func() { writePolicy(t, filepath.Dir(key), filepath.Base(key), string(tim.NewSigningKey(t).PublicPEM)) }},
	}
	prev := first
	for _, step := range steps {
		step.do()
		next, err := c.current(file)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if next == prev {
			t.Fatalf("%s: the cached policy was kept", step.name)
		}
		if c.isAdmitted(a, next) {
			t.Fatalf("%s: the admission made under the old policy still holds", step.name)
		}
		c.admit(a, next)
		prev = next
	}
	if err := os.Remove(key); err != nil {
		t.Fatal(err)
	}
	if _, err := c.current(file); err == nil {
		t.Fatal("policy whose key file is gone: parsed; want an error")
	}
	if c.isAdmitted(a, prev) {
		t.Fatal("key file gone: the admission still holds")
	}
}

// BenchmarkAdmitAdmitted is what a create of an image already admitted
// pays for its namespace's signature policy: the policy file and its key
// file read and hashed, the image's names looked up, the cache asked. (The
// make bench row sets whole creates with and without a policy side by side.)
func BenchmarkAdmitAdmitted(b *testing.B) {
	dir := b.TempDir()
	key := filepath.Join(dir, "key.pub")
	if err := os.WriteFile(key, tim.NewSigningKey(b).PublicPEM, 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "strict.json"), []byte(`{"default": [{"type": "reject"}], "transports": {"docker": {"r.example/a": [{"type": "sigstoreSigned", "keyPath": "`+key+`"}]}}}`), 0o644); err != nil {
		b.Fatal(err)
	}
	s, err := Open(Options{Root: b.TempDir(), SignaturePolicyDir: dir, Log: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	digest := "sha256:" + strings.Repeat("ab", 32)
	img := Image{ID: "sha256:" + strings.Repeat("cd", 32), RepoTags: []string{"r.example/a:1"}, RepoDigests: []string{"r.example/a@" + digest}}
	if _, err := s.update(func(images []Image) ([]Image, error) { return append(images, img), nil }); err != nil {
		b.Fatal(err)
	}
	pp, err := s.policies.current(filepath.Join(dir, "strict.json"))
	if err != nil {
		b.Fatal(err)
	}
	s.policies.admit(admission{file: filepath.Join(dir, "strict.json"), imageID: img.ID, ref: "r.example/a:1"}, pp)
	ctx := context.Background()
	for b.Loop() {
		if err := s.Admit(ctx, img, "r.example/a:1", "strict"); err != nil {
			b.Fatal(err)
		}
	}
}

// TestAdmitFetchIsBoundByThePullTimeout: signatures fetched at create are
// fetched under the pull's limits: a registry that never answers holds
// the create for pull_timeout, then it is refused naming the policy file.
func TestAdmitFetchIsBoundByThePullTimeout(t *testing.T) {
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(hang) })
	host := strings.TrimPrefix(srv.URL, "http://")
	dir := t.TempDir()
	key := keyFile(t, tim.NewSigningKey(t))
	file := writePolicy(t, dir, "strict.json", `{"default": [{"type": "sigstoreSigned", "keyPath": "`+key+`", "signedIdentity": {"type": "matchRepository"}}]}`)
	s := newTestStore(t, Options{SignaturePolicyDir: dir, PullTimeout: time.Second})
	digest := "sha256:" + strings.Repeat("ab", 32)
	img := Image{ID: "sha256:" + strings.Repeat("cd", 32), RepoTags: []string{host + "/app:1"}, RepoDigests: []string{host + "/app@" + digest}}
	if _, err := s.update(func(images []Image) ([]Image, error) { return append(images, img), nil }); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	err := s.Admit(testContext(t), img, host+"/app:1", "strict")
	took := time.Since(begin)
	wantAdmitRefused(t, "Admit with a registry that never answers", err, file, host+"/app:1")
	if !strings.Contains(err.Error(), "could not be fetched") || !strings.Contains(err.Error(), "pull timeout of 1s reached") || took > 20*time.Second {
		t.Fatalf("Admit: %v after %v; want a refusal for signatures that could not be fetched, within the pull timeout", err, took)
	}
}

// TestMergeSignatureSets: a look-up made again replaces the one kept; the
// record keeps the newest maxSignatureSets.
func TestMergeSignatureSets(t *testing.T) {
	set := func(repo, source string, payloads ...string) SignatureSet {
		s := SignatureSet{Repo: repo, Digest: "sha256:1", Source: source}
		for _, p := range payloads {
			s.Signatures = append(s.Signatures, KeptSignature{Payload: p})
		}
		return s
	}
	kept := mergeSignatureSets(nil, []SignatureSet{set("r/a", sourceTag, "p1"), set("r/a", sourceReferrers)})
	kept = mergeSignatureSets(kept, []SignatureSet{set("r/a", sourceTag, "p2"), set("r/b", sourceTag)})
	if got, ok := findSignatureSet(kept, "r/a", "sha256:1", sourceTag); !ok || len(got.Signatures) != 1 || got.Signatures[0].Payload != "p2" || len(kept) != 3 {
		t.Fatalf("after a new look-up of r/a's tag: %+v; want it replaced, 3 sets", kept)
	}
	for i := range maxSignatureSets + 5 {
		kept = mergeSignatureSets(kept, []SignatureSet{set(fmt.Sprintf("r/x%d", i), sourceTag)})
	}
	if len(kept) != maxSignatureSets || kept[len(kept)-1].Repo != fmt.Sprintf("r/x%d", maxSignatureSets+4) {
		t.Fatalf("%d sets kept, the last %q; want %d, the newest last", len(kept), kept[len(kept)-1].Repo, maxSignatureSets)
	}
}
