package server

import (
	"errors"
	"strings"
	"testing"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/server/internal/testreq"
	"github.com/minicri/minicri/server/validate"
	"github.com/minicri/minicri/store"
)

// The request checks that stay in server, beside the records they look up:
// IDs and list filters. The field rules are tested in server/validate.

func TestRequireID(t *testing.T) {
	cases := []struct {
		id   string
		want error // nil: looked up
	}{
		{"abc123", nil},
		{"ABCdef09", nil},
		{strings.Repeat("a", 64), nil},
		{"", validate.ErrInvalid},
		// Not IDs minicri makes: unknown, never a file name.
		{"../x", store.ErrNotFound},
		{"6ba7b810-9dad-11d1-80b4-00c04fd430c8", store.ErrNotFound},
		{strings.Repeat("a", 65), store.ErrNotFound},
		{strings.Repeat("n", 1<<20), store.ErrNotFound},
	}
	for _, c := range cases {
		err := requireID("container_id", c.id)
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("requireID(%.40q) = %v, want %v", c.id, err, c.want)
		}
		if err != nil && len(err.Error()) > 200 {
			t.Errorf("requireID(%.40q): error of %d bytes echoes the whole ID", c.id, len(err.Error()))
		}
	}
}

func TestValidateListFilters(t *testing.T) {
	cases := []struct {
		name  string
		err   error
		field string
	}{
		{"no filter", validateContainerFilter(nil), ""},
		{"id prefix", validateContainerFilter(&runtime.ContainerFilter{Id: "abc"}), ""},
		// An ID filter that is no ID matches nothing; it is not an error.
		{"id not hexadecimal", validateContainerFilter(&runtime.ContainerFilter{Id: "../abc"}), ""},
		{"sandbox id a UUID", validateContainerFilter(&runtime.ContainerFilter{PodSandboxId: "6ba7b810-9dad-11d1-80b4-00c04fd430c8"}), ""},
		{"sandbox filter id a UUID", validateSandboxFilter(&runtime.PodSandboxFilter{Id: "6ba7b810-9dad-11d1-80b4-00c04fd430c8"}), ""},
		{"unknown container state", validateContainerFilter(&runtime.ContainerFilter{State: &runtime.ContainerStateValue{State: 42}}), "filter.state.state"},
		{"unknown sandbox state", validateSandboxFilter(&runtime.PodSandboxFilter{State: &runtime.PodSandboxStateValue{State: 7}}), "filter.state.state"},
		{"selector with control characters", validateSandboxFilter(&runtime.PodSandboxFilter{LabelSelector: map[string]string{"a": "\x01"}}), "filter.label_selector[a]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { testreq.CheckValidation(t, c.err, c.field) })
	}
}
