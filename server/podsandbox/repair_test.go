package podsandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minicri/minicri/conmon"
	"github.com/minicri/minicri/internal/procstat"
	"github.com/minicri/minicri/network"
	"github.com/minicri/minicri/server/internal/lifecycle"
)

func TestSandboxLoss(t *testing.T) {
	id := strings.Repeat("a", 64)
	gone := filepath.Join(t.TempDir(), "net") // not a namespace file
	st, err := procstat.Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	self := st.StartTime // as conmon records it
	cases := []struct {
		name     string
		rec      lifecycle.SandboxRecord
		attached map[string]bool
		lost     string // a word of the answer; "" for a whole sandbox
	}{
		{"host namespaces, no network", lifecycle.SandboxRecord{ID: id}, map[string]bool{}, ""},
		{"pin gone", lifecycle.SandboxRecord{ID: id, Namespaces: network.Namespaces{Net: gone}}, nil, "pinned"},
		{"network torn down", lifecycle.SandboxRecord{ID: id, NetworkUp: true}, map[string]bool{}, "network"},
		{"network attached", lifecycle.SandboxRecord{ID: id, NetworkUp: true}, map[string]bool{id: true}, ""},
		{"attachments unknown", lifecycle.SandboxRecord{ID: id, NetworkUp: true}, nil, ""},
		{"infra process alive", lifecycle.SandboxRecord{ID: id, Infra: conmon.Infra{PID: os.Getpid(), StartTime: self}}, nil, ""},
		{"infra process gone", lifecycle.SandboxRecord{ID: id, Infra: conmon.Infra{PID: os.Getpid(), StartTime: self + 1}}, nil, "infra"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := sandboxLoss(c.rec, c.attached)
			if (got == "") != (c.lost == "") || !strings.Contains(got, c.lost) {
				t.Fatalf("sandboxLoss = %q, want %q", got, c.lost)
			}
		})
	}
}
