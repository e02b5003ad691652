package server

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/minicri/minicri/oci"
)

// statsList keeps the records its filter accepts, in order, leaves out one
// that stopped since the list was taken, and ends with any other failure.
func TestStatsList(t *testing.T) {
	failure := errors.New("cgroup unreadable")
	read := func(id string) (string, error) {
		switch id {
		case "gone":
			return "", fmt.Errorf("stats of container %s: %w", id, oci.ErrNotFound)
		case "broken":
			return "", fmt.Errorf("stats of container %s: %w", id, failure)
		}
		return "stats of " + id, nil
	}
	notSkipped := func(prefix, id string) bool { return id != "skipped" }
	tests := []struct {
		name    string
		records []string
		want    []string
		wantErr error
	}{
		{"none", nil, nil, nil},
		{"in order, filtered", []string{"b", "skipped", "a"}, []string{"stats of b", "stats of a"}, nil},
		{"stopped meanwhile", []string{"a", "gone", "b"}, []string{"stats of a", "stats of b"}, nil},
		{"a failure ends it", []string{"a", "broken", "b"}, nil, failure},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := statsList("", tc.records, notSkipped, read)
			if !errors.Is(err, tc.wantErr) || !slices.Equal(got, tc.want) {
				t.Errorf("statsList(%q) = %q, %v; want %q, %v", tc.records, got, err, tc.want, tc.wantErr)
			}
		})
	}
}
