//go:build e2e

package e2e

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/minicri/minicri/test/testimage"
)

// TestRegistryHostSpellingsAreOne: a signature policy's scope and a
// registry's hosts.toml hold for every spelling of the registry's host.
// With 127.0.0.1:PORT/e2e and reg.example/e2e requiring the key's
// signature and a default that accepts anything, the unsigned image pulled
// as 127.0.0.1:0PORT/… or as REG.EXAMPLE/… is refused by its registry's
// scope; the signed one pulled as REG.EXAMPLE:443/… comes through
// reg.example's own hosts.toml (_default's server is down by then) and is
// named reg.example/…; a host with no one spelling (127.1:PORT) is
// InvalidArgument naming the field. Before, both spellings missed the
// scope, REG.EXAMPLE reg.example's hosts.toml too (it went to _default's
// server), and the unsigned image was pulled.
func TestRegistryHostSpellingsAreOne(t *testing.T) {
	s := pushSignedImages(t)
	host, port, _ := strings.Cut(s.reg.Host(), ":")
	// cosign's identity: the repository as the puller names it.
	testimage.PushSignatures(t, s.repo, s.signed.digest, []testimage.Signature{s.key.Sign(t, "reg.example/e2e/app", s.signed.digest)})
	keyPath := filepath.Join(t.TempDir(), "cosign.pub")
	writeFile(t, keyPath, string(s.key.PublicPEM), 0o644)
	signed := fmt.Sprintf(`[{"type": "sigstoreSigned", "keyPath": %q, "signedIdentity": {"type": "matchRepository"}}]`, keyPath)
	policy := filepath.Join(t.TempDir(), "policy.json")
	writeFile(t, policy, fmt.Sprintf(`{"default": [{"type": "insecureAcceptAnything"}], "transports": {"docker": {
		%q: %s, "reg.example/e2e": %s}}}`, s.reg.Host()+"/e2e", signed, signed), 0o644)
	certsD := t.TempDir() // read at every pull: filled as the test goes
	d := StartDaemon(t, WithConfig(fmt.Sprintf("[image]\nsignature_policy = %q\nregistry_config_path = %q\n", policy, certsD)))
	wantNoImage := func(ref string) {
		t.Helper()
		if imgs := d.listImages(t, ""); len(imgs) != 0 {
			t.Fatalf("the unsigned image escaped its scope as %s: images %v", ref, imageIDs(imgs))
		}
	}
	refused := func(ref, scope string) {
		t.Helper()
		_, err := d.pullErr(ref, nil)
		wantNoImage(ref)
		wantRefused(t, "pull of "+ref, err, "", fmt.Sprintf("transports.docker.%q", scope), "a signature was required, but no signature exists")
	}

	writeHostsTOML(t, certsD, "reg.example", fmt.Sprintf("server = %q\n", "http://"+s.reg.Host()))
	writeHostsTOML(t, certsD, "_default", fmt.Sprintf("server = %q\n", "http://"+s.reg.Host()))
	refused("REG.EXAMPLE/e2e/app:unsigned", "reg.example/e2e")
	refused(host+":0"+port+"/e2e/app:unsigned", s.reg.Host()+"/e2e")

	writeHostsTOML(t, certsD, "_default", fmt.Sprintf("server = %q\n", "http://"+refusedHost(t)))
	if got := d.pull(t, "REG.EXAMPLE:443/e2e/app:signed"); got != s.signed.id {
		t.Fatalf("PullImage of REG.EXAMPLE:443/e2e/app:signed = %s, want %s", got, s.signed.id)
	}
	img := d.imageStatus(t, "reg.example/e2e/app:signed", false).GetImage()
	if img.GetId() != s.signed.id || !slices.Equal(img.GetRepoTags(), []string{"reg.example/e2e/app:signed"}) {
		t.Fatalf("ImageStatus of reg.example/e2e/app:signed = %v; want %s tagged in the host's one spelling", img, s.signed.id)
	}

	_, err := d.pullErr("127.1:"+port+"/e2e/app:unsigned", nil)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "image.image") || !strings.Contains(err.Error(), "127.1:"+port) {
		t.Fatalf("pull of 127.1:%s/…: %v; want InvalidArgument naming image.image and the host", port, err)
	}
}
