//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/test/registry"
	"github.com/minicri/minicri/test/testimage"
)

// The attack: an image whose USER is "4294967296" and whose /etc/passwd has
// a user of that name with uid 0, which would be non-root to a kubelet
// reading ImageStatus and root in the container (containerd's
// GHSA-fqw6-gf59-qr4w). ImageStatus gives no uid, only the name, and the
// create is refused with InvalidArgument naming
// the image's user; so are "-1", "+0" and an out-of-range group.
func TestOutOfRangeImageUserIsRefused(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	passwd := testimage.Layer(t, testimage.Dir("etc", 0o755), testimage.File("etc/passwd",
		"root:x:0:0:root:/root:/bin/sh\n"+
			"4294967296:x:0:0:root in disguise:/root:/bin/sh\n"+
			"-1:x:0:0:root in disguise:/root:/bin/sh\n"+
			"app:x:1000:1000:app:/home/app:/bin/sh\n", 0o644),
		testimage.File("etc/group", "root:x:0:\n4294967296:x:0:\napp:x:1000:\n", 0o644))
	d := StartDaemon(t)
	podCfg := d.podConfig("user")
	podCfg.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{NamespaceOptions: &runtime.NamespaceOption{Network: runtime.NamespaceMode_NODE}}
	pod := d.runPod(t, podCfg)
	for _, user := range []string{"4294967296", "-1", "+0", "1000:4294967296"} {
		img := testimage.Image(t, []v1.Layer{testimage.BusyboxLayer(t), passwd}, testimage.WithUser(user))
		p := pushImage(t, reg, "user:"+randomHex(4), img)
		d.pull(t, p.ref)
		st := d.imageStatus(t, p.ref, false).GetImage()
		name, _, _ := strings.Cut(user, ":")
		if name == "1000" {
			if st.GetUid().GetValue() != 1000 || st.GetUsername() != "" {
				t.Errorf("USER %q: ImageStatus uid %v, username %q; want uid 1000", user, st.GetUid(), st.GetUsername())
			}
		} else if st.GetUid() != nil || st.GetUsername() != name {
			t.Errorf("USER %q: ImageStatus uid %v, username %q; want no uid and the name %q", user, st.GetUid(), st.GetUsername(), name)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		id, err := d.Runtime.CreateContainer(ctx, pod, containerConfig("c"+randomHex(4), p.ref, "id", "-u"), podCfg)
		cancel()
		if err == nil {
			_ = d.Runtime.StartContainer(context.Background(), id)
			out := ""
			if st := d.waitExited(t, id, 30*time.Second); st != nil {
				out = readLog(t, st.GetLogPath())
			}
			t.Errorf("USER %q: the container was made and ran as %q; want the create refused", user, strings.TrimSpace(out))
			continue
		}
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "image's user \""+user+"\"") {
			t.Errorf("USER %q: CreateContainer = %v; want InvalidArgument naming the image's user", user, err)
		}
	}
	resp, err := d.Runtime.ListContainers(context.Background(), &runtime.ContainerFilter{PodSandboxId: pod})
	if err != nil || len(resp) != 0 {
		t.Errorf("containers left after the refused creates: %v, %v", resp, err)
	}
}
