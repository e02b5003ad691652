//go:build tools

// Package cluster pins the main packages of the kubeadm cluster that
// hack/cluster.sh builds on minicri (hack/build-cluster.sh) so that go mod
// tidy keeps what building them needs. The kubelet, kube-apiserver and etcd
// are hack/kubelet's: this module is apart so that their cache key (that
// module's go.sum) does not change with what the cluster adds.
package cluster

import (
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubeadm"
	_ "k8s.io/kubernetes/cmd/kubectl"

	_ "github.com/minicri/minicri/hack/cluster/coredns"
	_ "github.com/minicri/minicri/hack/cluster/images"
)
