package wire

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestConfigArgsRoundTrip(t *testing.T) {
	for _, c := range []Config{
		{ID: "a", Bundle: "/b", Runtime: "runc", ExitFile: "/e", SocketDir: "/s", LogMaxLine: DefaultLogMaxLine},
		{
			ID: "c1", Bundle: "/run/b", Runtime: "/usr/bin/crun", RuntimeRoot: "/run/crun",
			RuntimeArgs: []string{"--systemd-cgroup", "--log-format=json", "value with spaces"},
			LogPath:     "/var/log/pods/x/0.log", LogMaxLine: 100, ExitFile: "/run/e", SocketDir: "/run/s",
			Terminal: true, Stdin: true, StdinOnce: true, JoinDir: "/run/minicri/monitors/c1",
			Rootfs: "/var/lib/minicri/image/snapshots/c1/merged", RootfsStage: "/run/minicri-rootfs",
			SysStage: "/run/minicri-sys",
		},
	} {
		got, err := ParseArgs(c.Args())
		if err != nil {
			t.Fatalf("ParseArgs(%q): %v", c.Args(), err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, c)
		}
	}
}

func TestParseArgsRejects(t *testing.T) {
	valid := []string{"--id", "a", "--bundle", "/b", "--runtime", "runc", "--exit-file", "/e", "--socket-dir", "/s"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", append(valid, "--nope", "x"), "unknown flag --nope"},
		{"missing value", append(valid, "--log-path"), "needs a value"},
		{"rootfs without a stage", append(valid, "--rootfs", "/r"), "rootfs and rootfs stage"},
		{"relative stage", append(valid, "--rootfs", "/r", "--rootfs-stage", "stage"), "rootfs and rootfs stage"},
		{"value on a switch", append(valid, "--stdin=true"), "takes no value"},
		{"bad max line", append(valid, "--log-max-line", "-1"), "--log-max-line"},
		{"relative bundle", append(valid, "--bundle", "b"), "bundle"},
		{"id with slash", append(valid, "--id", "../x"), "id"},
		{"stdin once alone", append(valid, "--stdin-once"), "stdin once"},
		{"missing exit file", valid[:6], "exit file"},
		{"relative join dir", append(valid, "--join-dir", "m"), "join dir"},
		{"sys stage without a rootfs stage", append(valid, "--sys-stage", "/s"), "sys stage"},
		{"relative sys stage", append(valid, "--rootfs", "/r", "--rootfs-stage", "/st", "--sys-stage", "s"), "sys stage"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseArgs(tc.args)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseArgs: %v, want an error about %q", err, tc.want)
			}
		})
	}
}

func TestHelperMessage(t *testing.T) {
	if pid, err := ParseHelper(HelperMessage(4242)); err != nil || pid != 4242 {
		t.Fatalf("ParseHelper(HelperMessage(4242)) = %d, %v", pid, err)
	}
	for _, bad := range []string{"created 1 2\n", "helper \n", "helper -3\n", "helper x\n", ""} {
		if _, err := ParseHelper([]byte(bad)); err == nil {
			t.Errorf("ParseHelper(%q) took it", bad)
		}
	}
}

func TestSyncMessages(t *testing.T) {
	c, m, err := ParseSync(CreatedMessage(42, 7))
	if err != nil || c != 42 || m != 7 {
		t.Fatalf("created: %d %d %v, want 42 7", c, m, err)
	}
	_, _, err = ParseSync(FailedMessage("runc create failed: boom\n"))
	if !errors.Is(err, ErrCreateFailed) || !strings.Contains(err.Error(), "runc create failed: boom") {
		t.Fatalf("failed message: %v, want ErrCreateFailed with runc's text", err)
	}
	for _, bad := range []string{"", "created 1", "created x 2\n", "created 1 0\n", "hello\n"} {
		if _, _, err := ParseSync([]byte(bad)); err == nil || errors.Is(err, ErrCreateFailed) {
			t.Errorf("ParseSync(%q): %v, want a malformed-message error", bad, err)
		}
	}
}

func TestExitStatusRoundTrip(t *testing.T) {
	at := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
	for _, e := range []ExitStatus{{Code: 0, At: at}, {Code: 137, At: at, Reason: "OOMKilled"}} {
		got, err := ParseExit(e.Marshal())
		if err != nil || got.Code != e.Code || !got.At.Equal(e.At) || got.Reason != e.Reason {
			t.Errorf("round trip of %+v: %+v, %v", e, got, err)
		}
	}
	if _, err := ParseExit([]byte("exit_code=1\n")); err == nil {
		t.Error("ParseExit without exited_at: no error")
	}
	if got, err := ParseExit([]byte("exit_code=2\nexited_at=2024-05-06T07:08:09Z\nfuture=x\n")); err != nil || got.Code != 2 {
		t.Errorf("ParseExit with an unknown key: %+v, %v", got, err)
	}
}

func TestResizeAndReplies(t *testing.T) {
	p := ResizePayload(300, 2)
	if rows, cols, ok := ParseResize(p[:]); !ok || rows != 300 || cols != 2 {
		t.Errorf("resize round trip: %d %d %v", rows, cols, ok)
	}
	if _, _, ok := ParseResize([]byte{1}); ok {
		t.Error("short resize payload accepted")
	}
	if err := ParseReply(ReplyOK); err != nil {
		t.Errorf("ok reply: %v", err)
	}
	if err := ParseReply(ReplyError(errors.New("disk full"))); err == nil || err.Error() != "disk full" {
		t.Errorf("error reply: %v", err)
	}
}

// TestParseArgsAllocatesNothing: a shared monitor, whose collector is off,
// parses two command lines for every container that joins it; whatever
// ParseArgs allocates stays on its heap (it once made a table of field
// pointers for each flag: ~5 KB a parse). Only --runtime-arg values need
// room of their own.
func TestParseArgsAllocatesNothing(t *testing.T) {
	args := Config{
		ID: "c1", Bundle: "/run/b", Runtime: "/usr/bin/crun", RuntimeRoot: "/run/crun",
		LogPath: "/var/log/pods/x/0.log", LogMaxLine: 100, ExitFile: "/run/e", SocketDir: "/run/s",
		Terminal: true, Stdin: true, StdinOnce: true, JoinDir: "/run/minicri/monitors/c1",
		Rootfs: "/var/lib/minicri/image/snapshots/c1/merged", RootfsStage: "/run/minicri-rootfs",
	}.Args()
	if n := testing.AllocsPerRun(20, func() {
		if _, err := ParseArgs(args); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("ParseArgs allocates %v times, want 0", n)
	}
}
