package server

import (
	"testing"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/oci"
)

// TestSecurityProfiles pins how the structured and the deprecated string
// forms map, seccomp and AppArmor differing in what "other" means.
func TestSecurityProfiles(t *testing.T) {
	profile := func(typ runtime.SecurityProfile_ProfileType, ref string) *runtime.SecurityProfile {
		return &runtime.SecurityProfile{ProfileType: typ, LocalhostRef: ref}
	}
	for _, tc := range []struct {
		name     string
		sc       *runtime.LinuxContainerSecurityContext
		seccomp  oci.SeccompProfile
		apparmor oci.AppArmorProfile
	}{
		{"none", nil, oci.SeccompProfile{}, oci.AppArmorProfile{Type: oci.ProfileUnset}},
		{"structured default", &runtime.LinuxContainerSecurityContext{
			Seccomp:  profile(runtime.SecurityProfile_RuntimeDefault, ""),
			Apparmor: profile(runtime.SecurityProfile_RuntimeDefault, ""),
		}, oci.SeccompProfile{Type: oci.ProfileRuntimeDefault}, oci.AppArmorProfile{Type: oci.ProfileRuntimeDefault}},
		{"structured localhost", &runtime.LinuxContainerSecurityContext{
			Seccomp:  profile(runtime.SecurityProfile_Localhost, "/p.json"),
			Apparmor: profile(runtime.SecurityProfile_Localhost, "p"),
		}, oci.SeccompProfile{Type: oci.ProfileLocalhost, LocalhostPath: "/p.json"}, oci.AppArmorProfile{Type: oci.ProfileLocalhost, LocalhostName: "p"}},
		{"structured unconfined", &runtime.LinuxContainerSecurityContext{
			Seccomp:  profile(runtime.SecurityProfile_Unconfined, ""),
			Apparmor: profile(runtime.SecurityProfile_Unconfined, ""),
		}, oci.SeccompProfile{}, oci.AppArmorProfile{Type: oci.ProfileUnconfined}},
		{"string default", &runtime.LinuxContainerSecurityContext{
			SeccompProfilePath: "docker/default", ApparmorProfile: "runtime/default",
		}, oci.SeccompProfile{Type: oci.ProfileRuntimeDefault}, oci.AppArmorProfile{Type: oci.ProfileRuntimeDefault}},
		{"string docker/default is seccomp only", &runtime.LinuxContainerSecurityContext{
			SeccompProfilePath: "runtime/default", ApparmorProfile: "docker/default",
		}, oci.SeccompProfile{Type: oci.ProfileRuntimeDefault}, oci.AppArmorProfile{Type: oci.ProfileUnconfined}},
		{"string localhost", &runtime.LinuxContainerSecurityContext{
			SeccompProfilePath: "localhost//p.json", ApparmorProfile: "localhost/p",
		}, oci.SeccompProfile{Type: oci.ProfileLocalhost, LocalhostPath: "/p.json"}, oci.AppArmorProfile{Type: oci.ProfileLocalhost, LocalhostName: "p"}},
		{"string unconfined", &runtime.LinuxContainerSecurityContext{
			SeccompProfilePath: "unconfined", ApparmorProfile: "unconfined",
		}, oci.SeccompProfile{}, oci.AppArmorProfile{Type: oci.ProfileUnconfined}},
	} {
		if got := seccompProfile(tc.sc); got != tc.seccomp {
			t.Errorf("%s: seccomp %+v, want %+v", tc.name, got, tc.seccomp)
		}
		if got := appArmorProfile(tc.sc); got != tc.apparmor {
			t.Errorf("%s: apparmor %+v, want %+v", tc.name, got, tc.apparmor)
		}
	}
}

// An image volume binds its mounted image inert (nosuid, nodev);
// a host path mount stays as asked.
func TestOCIMountsImageVolumeIsInert(t *testing.T) {
	mounts := []*runtime.Mount{
		{ContainerPath: "/host", HostPath: "/srv/data"},
		{ContainerPath: "/vol", Image: &runtime.ImageSpec{Image: "example.com/vol:1"}, Readonly: true},
	}
	got := ociMounts(mounts, map[int]string{1: "/state/image/snapshots/c.iv1/merged"})
	want := []oci.Mount{
		{ContainerPath: "/host", HostPath: "/srv/data"},
		{ContainerPath: "/vol", HostPath: "/state/image/snapshots/c.iv1/merged", Readonly: true, Inert: true},
	}
	if len(got) != len(want) {
		t.Fatalf("ociMounts = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("mount %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}
