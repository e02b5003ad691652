package oci

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

const testPasswd = `root:x:0:0:root:/root:/bin/sh
# a comment
app:x:1000:1000:app user:/home/app:/bin/sh
broken line
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
`

const testGroup = `root:x:0:
app:x:1000:
extra:x:2000:app,other
audio:x:29:other
`

func writeRootfs(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func int64p(v int64) *int64 { return &v }

func TestResolveUser(t *testing.T) {
	rootfs := writeRootfs(t, map[string]string{"etc/passwd": testPasswd, "etc/group": testGroup})
	tests := []struct {
		name          string
		imageUser     string
		runAsUser     *int64
		runAsUsername string
		runAsGroup    *int64
		supplemental  []int64
		want          User
		wantErr       error
	}{
		{name: "no user is root", want: User{UID: 0, GID: 0, AdditionalGids: []uint32{0}, Username: "root", Home: "/root"}},
		{name: "name", imageUser: "app", want: User{UID: 1000, GID: 1000, AdditionalGids: []uint32{1000, 2000}, Username: "app", Home: "/home/app"}},
		{name: "uid in passwd", imageUser: "1000", want: User{UID: 1000, GID: 1000, AdditionalGids: []uint32{1000, 2000}, Username: "app", Home: "/home/app"}},
		{name: "uid not in passwd", imageUser: "4242", want: User{UID: 4242, GID: 0, AdditionalGids: []uint32{0}}},
		{name: "uid:gid", imageUser: "1000:3000", want: User{UID: 1000, GID: 3000, AdditionalGids: []uint32{3000, 2000}, Username: "app", Home: "/home/app"}},
		{name: "name:group", imageUser: "app:audio", want: User{UID: 1000, GID: 29, AdditionalGids: []uint32{29, 2000}, Username: "app", Home: "/home/app"}},
		{name: "name:group that is also a membership", imageUser: "app:extra", want: User{UID: 1000, GID: 2000, AdditionalGids: []uint32{2000}, Username: "app", Home: "/home/app"}},
		{name: "runAsUser overrides image user and its group", imageUser: "root:29", runAsUser: int64p(1000), want: User{UID: 1000, GID: 1000, AdditionalGids: []uint32{1000, 2000}, Username: "app", Home: "/home/app"}},
		{name: "runAsUsername", imageUser: "root", runAsUsername: "nobody", want: User{UID: 65534, GID: 65534, AdditionalGids: []uint32{65534}, Username: "nobody", Home: "/nonexistent"}},
		{name: "runAsGroup overrides", imageUser: "app:audio", runAsGroup: int64p(5000), want: User{UID: 1000, GID: 5000, AdditionalGids: []uint32{5000, 2000}, Username: "app", Home: "/home/app"}},
		{name: "supplemental groups deduplicated", imageUser: "app", supplemental: []int64{7, 7, 1000}, want: User{UID: 1000, GID: 1000, AdditionalGids: []uint32{1000, 2000, 7}, Username: "app", Home: "/home/app"}},
		{name: "unknown name", imageUser: "ghost", wantErr: ErrInvalid},
		{name: "unknown group", imageUser: "app:ghosts", wantErr: ErrInvalid},
		{name: "negative runAsUser", runAsUser: int64p(-1), wantErr: ErrInvalid},
		{name: "runAsGroup beyond 32 bits", runAsGroup: int64p(1 << 33), wantErr: ErrInvalid},
		{name: "negative supplemental group", supplemental: []int64{-5}, wantErr: ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ResolveUser(rootfs, tt.imageUser, tt.runAsUser, tt.runAsUsername, tt.runAsGroup, tt.supplemental)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("user = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestResolveUserStrict: the Strict policy keeps the image's /etc/group
// memberships (app is in 2000 there) out; the gid and the pod's groups stay.
func TestResolveUserStrict(t *testing.T) {
	rootfs := writeRootfs(t, map[string]string{"etc/passwd": testPasswd, "etc/group": testGroup})
	got, err := ResolveUserStrict(rootfs, "app", nil, "", nil, []int64{7})
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint32{1000, 7}; !reflect.DeepEqual(got.AdditionalGids, want) || got.UID != 1000 || got.GID != 1000 {
		t.Errorf("strict user = %+v, want uid 1000 gid 1000 groups %v", got, want)
	}
}

func TestResolveUserWithoutAccountFiles(t *testing.T) {
	rootfs := t.TempDir()
	tests := []struct {
		name      string
		imageUser string
		want      User
		wantErr   error
	}{
		{name: "numeric uid", imageUser: "1000", want: User{UID: 1000, GID: 0, AdditionalGids: []uint32{0}}},
		{name: "numeric uid:gid", imageUser: "1000:1000", want: User{UID: 1000, GID: 1000, AdditionalGids: []uint32{1000}}},
		{name: "name needs passwd", imageUser: "app", wantErr: ErrInvalid},
		{name: "group name needs group", imageUser: "1000:staff", wantErr: ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ResolveUser(rootfs, tt.imageUser, nil, "", nil, nil)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if err == nil && !reflect.DeepEqual(got, tt.want) {
				t.Errorf("user = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// An image whose /etc/passwd and /etc/group are symlinks out of the rootfs
// must not make the daemon read the host's files.
func TestResolveUserDoesNotFollowSymlinksOutOfRootfs(t *testing.T) {
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "passwd"), []byte("evil:x:0:0::/evil:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "group"), []byte("evilgroup:x:0:evil\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	links := map[string]func(rootfs string) string{
		"relative": func(string) string { return "../../outside/passwd" },
		"absolute": func(string) string { return filepath.Join(outside, "passwd") },
	}
	for name, target := range links {
		t.Run(name, func(t *testing.T) {
			rootfs := filepath.Join(base, "rootfs-"+name)
			if err := os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target(rootfs), filepath.Join(rootfs, "etc/passwd")); err != nil {
				t.Fatal(err)
			}
			groupTarget := filepath.Join(filepath.Dir(target(rootfs)), "group")
			if err := os.Symlink(groupTarget, filepath.Join(rootfs, "etc/group")); err != nil {
				t.Fatal(err)
			}
			if _, err := ResolveUser(rootfs, "evil", nil, "", nil, nil); !errors.Is(err, ErrInvalid) {
				t.Errorf("user evil resolved through a symlink out of the rootfs: err = %v", err)
			}
			if _, err := ResolveUser(rootfs, "0:evilgroup", nil, "", nil, nil); !errors.Is(err, ErrInvalid) {
				t.Errorf("group evilgroup resolved through a symlink out of the rootfs: err = %v", err)
			}
			u, err := ResolveUser(rootfs, "0", nil, "", nil, nil)
			if err != nil {
				t.Fatalf("numeric user with an escaping passwd link: %v", err)
			}
			if u.Home == "/evil" || u.Username == "evil" {
				t.Errorf("uid 0 took the host file's entry: %+v", u)
			}
		})
	}
}

// A symlink inside the rootfs is followed inside it.
func TestResolveUserFollowsSymlinksWithinRootfs(t *testing.T) {
	rootfs := writeRootfs(t, map[string]string{"usr/share/passwd": testPasswd})
	if err := os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/usr/share/passwd", filepath.Join(rootfs, "etc/passwd")); err != nil {
		t.Fatal(err)
	}
	u, err := ResolveUser(rootfs, "app", nil, "", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if u.UID != 1000 || u.Home != "/home/app" {
		t.Errorf("user = %+v, want uid 1000 home /home/app", u)
	}
}

func TestResolveUserRefusesNonRegularPasswd(t *testing.T) {
	rootfs := t.TempDir()
	if err := os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A FIFO would block the daemon's read forever.
	if err := unix.Mkfifo(filepath.Join(rootfs, "etc/passwd"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ResolveUser(rootfs, "1000", nil, "", nil, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("err = %v, want ErrInvalid for a FIFO /etc/passwd", err)
	}
}

// An image can name a user "4294967296" (or "-1", "+1000", "1000 ") in its
// /etc/passwd with uid 0, while ImageStatus, read by the kubelet's
// runAsNonRoot check, takes that USER for a number. Such a USER (or group)
// is refused, naming the image's user, and never looked up as a name
// (GHSA-fqw6-gf59-qr4w in containerd). Before: uid 0 for every one of them
// but "+1000" and "-1", which failed as unknown names.
func TestResolveUserRefusesOutOfRangeAndSignedIDs(t *testing.T) {
	passwd := testPasswd + "4294967296:x:0:0:root in disguise:/root:/bin/sh\n" +
		"4294967295:x:0:0:no id:/root:/bin/sh\n" +
		"99999999999999999999:x:0:0:wider than 64 bits:/root:/bin/sh\n" +
		"1000 :x:0:0:trailing space:/root:/bin/sh\n" +
		"evil:x:4294967296:0:uid out of range:/root:/bin/sh\n" +
		"noid:x:4294967295:0:uid is the kernel's no id:/root:/bin/sh\n"
	group := testGroup + "4294967296:x:0:\n"
	rootfs := writeRootfs(t, map[string]string{"etc/passwd": passwd, "etc/group": group})
	for _, user := range []string{
		"4294967296", "4294967295", "99999999999999999999", "18446744073709551616",
		"-1", "+1000", "+0", "-0", "1000 ", " 1000", "10 00", "1000\t",
		"1000:4294967296", "1000:-1", "1000:+0", "app:4294967296", "1000: 0",
		"evil", "noid", // names whose uid does not fit: "not found"
	} {
		t.Run(user, func(t *testing.T) {
			got, err := ResolveUser(rootfs, user, nil, "", nil, nil)
			if err == nil {
				t.Fatalf("USER %q resolved to %+v, want an error", user, got)
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), fmt.Sprintf("the image's user %q", user)) {
				t.Fatalf("USER %q: err = %v, want ErrInvalid naming the image's user", user, err)
			}
		})
	}
	// The largest id there is still works, as a number.
	if u, err := ResolveUser(rootfs, "4294967294:4294967294", nil, "", nil, nil); err != nil || u.UID != MaxID || u.GID != MaxID {
		t.Fatalf("USER 4294967294:4294967294 = %+v, %v; want uid and gid %d", u, err, MaxID)
	}
	// A pod's run_as_username is taken the same way, and named as such.
	if _, err := ResolveUser(rootfs, "", nil, "4294967296", nil, nil); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "run_as_username") {
		t.Fatalf("run_as_username 4294967296: err = %v, want ErrInvalid naming run_as_username", err)
	}
}

// TestResolveUserSkipsCommentsAndNISLines: a comment or a NIS line before
// root's entry is not an account of uid 0 (moby/sys/user reads "# x" in
// /etc/passwd as a user named "# x" with uid 0), so root keeps its name and
// home, and none of them can be named as a user or group.
func TestResolveUserSkipsCommentsAndNISLines(t *testing.T) {
	rootfs := writeRootfs(t, map[string]string{
		"etc/passwd": "# managed by hand:x:0:0::/comment:\n+::::::\n-nis:x:0:0::/nis:\nroot:x:0:0:root:/root:/bin/sh\n",
		"etc/group":  "#wheel:x:0:root\n+staff:x:50:root\nroot:x:0:\n",
	})
	got, err := ResolveUser(rootfs, "", nil, "", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := (User{UID: 0, GID: 0, AdditionalGids: []uint32{0}, Username: "root", Home: "/root"}); !reflect.DeepEqual(got, want) {
		t.Errorf("root = %+v, want %+v", got, want)
	}
	for _, user := range []string{"#wheel", "root:+staff", "root:#wheel"} {
		if u, err := ResolveUser(rootfs, user, nil, "", nil, nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("USER %q = %+v, %v; want ErrInvalid", user, u, err)
		}
	}
}

// ParseID is what both the container's identity and ImageStatus read, so
// the two cannot disagree.
func TestParseID(t *testing.T) {
	cases := []struct {
		in      string
		id      uint32
		numeric bool
		bad     bool
	}{
		{"", 0, false, false},
		{"0", 0, true, false},
		{"0001000", 1000, true, false},
		{"4294967294", MaxID, true, false},
		{"4294967295", 0, true, true},
		{"4294967296", 0, true, true},
		{"18446744073709551616", 0, true, true},
		{"app", 0, false, false},
		{"app-1", 0, false, false},
		{"1000a", 0, false, false}, // a name, as runc and containerd take it
		{"-1", 0, false, true},
		{"+1000", 0, false, true},
		{" 1000", 0, false, true},
		{"1000 ", 0, false, true},
		{"ap p", 0, false, true},
		{"app\n", 0, false, true},
		{"\u00a0app", 0, false, true},
	}
	for _, c := range cases {
		id, numeric, err := ParseID(c.in)
		if id != c.id || numeric != c.numeric || (err != nil) != c.bad {
			t.Errorf("ParseID(%q) = %d, %v, %v; want %d, %v, error %v", c.in, id, numeric, err, c.id, c.numeric, c.bad)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseID(%q): %v is not ErrInvalid", c.in, err)
		}
	}
}
