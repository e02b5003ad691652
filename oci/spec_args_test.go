package oci

import (
	"errors"
	"slices"
	"testing"
)

func TestResolveArgs(t *testing.T) {
	entry := []string{"/entry", "-x"}
	cmd := []string{"serve", "--port=80"}
	tests := []struct {
		name                                  string
		imageEntrypoint, imageCmd, command, a []string
		want                                  []string
		wantErr                               error
	}{
		{name: "image entrypoint and cmd", imageEntrypoint: entry, imageCmd: cmd, want: []string{"/entry", "-x", "serve", "--port=80"}},
		{name: "image cmd only", imageCmd: cmd, want: cmd},
		{name: "command replaces entrypoint and cmd", imageEntrypoint: entry, imageCmd: cmd, command: []string{"/bin/sh"}, want: []string{"/bin/sh"}},
		{name: "command plus args", imageEntrypoint: entry, imageCmd: cmd, command: []string{"/bin/sh"}, a: []string{"-c", "true"}, want: []string{"/bin/sh", "-c", "true"}},
		{name: "args replace cmd only", imageEntrypoint: entry, imageCmd: cmd, a: []string{"debug"}, want: []string{"/entry", "-x", "debug"}},
		{name: "args without entrypoint", imageCmd: cmd, a: []string{"/bin/echo", "hi"}, want: []string{"/bin/echo", "hi"}},
		{name: "nothing at all", wantErr: ErrNoCommand},
		{name: "entrypoint empty and args empty", imageEntrypoint: []string{}, imageCmd: []string{}, wantErr: ErrNoCommand},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ResolveArgs(tt.imageEntrypoint, tt.imageCmd, tt.command, tt.a)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("args = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestResolveArgsDoesNotAliasInputs(t *testing.T) {
	command := make([]string, 1, 4)
	command[0] = "/bin/sh"
	got, err := ResolveArgs(nil, nil, command, []string{"-c"})
	if err != nil {
		t.Fatal(err)
	}
	got[0] = "changed"
	if command[0] != "/bin/sh" {
		t.Errorf("ResolveArgs result shares memory with the command slice")
	}
}

func TestMergeEnv(t *testing.T) {
	tests := []struct {
		name     string
		imageEnv []string
		env      []KeyValue
		want     []string
	}{
		{
			name:     "container overrides image in place",
			imageEnv: []string{"PATH=/bin", "A=1", "B=2"},
			env:      []KeyValue{{"A", "x"}, {"C", "3"}},
			want:     []string{"PATH=/bin", "A=x", "B=2", "C=3"},
		},
		{
			name: "default PATH when none",
			env:  []KeyValue{{"A", "1"}},
			want: []string{"PATH=" + DefaultPath, "A=1"},
		},
		{
			name:     "container PATH wins over the default",
			imageEnv: []string{"A=1"},
			env:      []KeyValue{{"PATH", "/opt/bin"}},
			want:     []string{"A=1", "PATH=/opt/bin"},
		},
		{
			name:     "later duplicate wins",
			imageEnv: []string{"PATH=/bin"},
			env:      []KeyValue{{"A", "1"}, {"A", "2"}},
			want:     []string{"PATH=/bin", "A=2"},
		},
		{
			name:     "values keep their equals signs",
			imageEnv: []string{"PATH=/bin", "OPTS=a=b"},
			env:      []KeyValue{{"EMPTY", ""}},
			want:     []string{"PATH=/bin", "OPTS=a=b", "EMPTY="},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := MergeEnv(tt.imageEnv, tt.env); !slices.Equal(got, tt.want) {
				t.Errorf("MergeEnv = %q, want %q", got, tt.want)
			}
		})
	}
}
