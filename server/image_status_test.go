package server

import (
	"testing"

	"github.com/minicri/minicri/image"
)

// ImageStatus gives the kubelet's runAsNonRoot check a uid only when it is
// exactly the uid the container will run as. Before, "4294967296" was
// reported as that uid (non-root to a kubelet before v1.33) while the
// container ran as the image's /etc/passwd entry of that name (uid 0), and
// "-1" and "+0" were reported as uids -1 and 0.
func TestImageStatusUserIsWhatTheContainerRunsAs(t *testing.T) {
	s := &Server{}
	cases := []struct {
		user     string
		uid      int64 // -1: no uid
		username string
	}{
		{"", -1, ""},
		{"0", 0, ""},
		{"1000", 1000, ""},
		{"1000:1000", 1000, ""},
		{"app", -1, "app"},
		{"app:staff", -1, "app"},
		{"4294967294", 4294967294, ""},
		{"4294967295", -1, "4294967295"},
		{"4294967296", -1, "4294967296"},
		{"4294967296:0", -1, "4294967296"},
		{"-1", -1, "-1"},
		{"+0", -1, "+0"},
		{" 0", -1, " 0"},
	}
	for _, c := range cases {
		img := s.criImage(image.Image{Config: image.Config{User: c.user}})
		gotUID := int64(-1)
		if img.GetUid() != nil {
			gotUID = img.GetUid().GetValue()
		}
		if gotUID != c.uid || img.GetUsername() != c.username {
			t.Errorf("USER %q: uid %d, username %q; want uid %d, username %q", c.user, gotUID, img.GetUsername(), c.uid, c.username)
		}
	}
}
