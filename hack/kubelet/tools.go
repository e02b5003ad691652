//go:build tools

// Package kubelet pins the kubelet's main package so that go mod tidy keeps
// what building it needs.
package kubelet

import _ "k8s.io/kubernetes/cmd/kubelet"
