package oci

import "testing"

func TestParseFeatures(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want Features
	}{
		{"runc 1.1 without idmap", `{"mountOptions":["bind","ro","rro"],"linux":{"namespaces":["user"]}}`, Features{RecursiveReadOnly: true}},
		{"idmap enabled", `{"mountOptions":["rro"],"linux":{"mountExtensions":{"idmap":{"enabled":true}}}}`, Features{RecursiveReadOnly: true, IDMappedMounts: true}},
		{"idmap disabled", `{"mountOptions":["ro"],"linux":{"mountExtensions":{"idmap":{"enabled":false}}}}`, Features{}},
		{"empty", `{}`, Features{}},
		{"bind options", `{"mountOptions":["ro","noexec","nodev","nosuid"]}`, Features{BindOptions: true}},
		{"bind options without nodev", `{"mountOptions":["ro","noexec","nosuid"]}`, Features{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseFeatures([]byte(tt.doc))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
	if _, err := parseFeatures([]byte("not json")); err == nil {
		t.Error("parse of a non-JSON document succeeded")
	}
}

func TestFeaturesOfMissingBinary(t *testing.T) {
	r := &Runtime{Path: "/nonexistent/runc"}
	if f, err := r.Features(); err == nil || f != (Features{}) {
		t.Errorf("Features() = %+v, %v; want none and an error", f, err)
	}
}
