//go:build tools

// Package kubelet pins the main packages the kubelet end-to-end tests run
// (the kubelet, and the API server and etcd of the tests that need mirror
// pods) so that go mod tidy keeps what building them needs.
package kubelet

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubelet"

	_ "github.com/minicri/minicri/hack/kubelet/etcd"
)
