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

// statsOf reads the record it looks up and passes on any failure, even the
// stop that statsList skips; a failed lookup reads nothing.
func TestStatsOf(t *testing.T) {
	unknown := errors.New("no such record")
	lookup := func(id string) (string, error) {
		if id == "unknown" {
			return "", unknown
		}
		return id, nil
	}
	var reads []string
	read := func(rec string) (string, error) {
		reads = append(reads, rec)
		if rec == "gone" {
			return "", oci.ErrNotFound
		}
		return "stats of " + rec, nil
	}
	tests := []struct {
		id, want  string
		wantErr   error
		wantReads []string
	}{
		{"a", "stats of a", nil, []string{"a"}},
		{"gone", "", oci.ErrNotFound, []string{"gone"}},
		{"unknown", "", unknown, nil},
	}
	for _, tc := range tests {
		reads = nil
		got, err := statsOf(tc.id, lookup, read)
		if got != tc.want || !errors.Is(err, tc.wantErr) || !slices.Equal(reads, tc.wantReads) {
			t.Errorf("statsOf(%q) = %q, %v after reading %q; want %q, %v after reading %q", tc.id, got, err, reads, tc.want, tc.wantErr, tc.wantReads)
		}
	}
}
