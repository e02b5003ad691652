package server

import (
	"reflect"
	"testing"

	"github.com/minicri/minicri/server/internal/lifecycle"
)

func TestParseProcStatusUser(t *testing.T) {
	status := "Name:\tsh\nUmask:\t0022\nUid:\t1000\t1001\t1000\t1000\nGid:\t3000\t3000\t3000\t3000\nFDSize:\t64\nGroups:\t3000 4000 \nNStgid:\t1\n"
	got, err := parseProcStatusUser([]byte(status))
	if err != nil {
		t.Fatal(err)
	}
	want := &lifecycle.ContainerUser{UID: 1001, GID: 3000, Groups: []int64{3000, 4000}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("user = %+v, want %+v (the effective ids)", got, want)
	}
	if _, err := parseProcStatusUser([]byte("Name:\tsh\nGroups:\t\n")); err == nil {
		t.Fatal("a status without Uid and Gid parsed")
	}
}
