// Package kubeletshape gives CRI configs the labels and annotations a
// kubelet (v1.37, pkg/kubelet/kuberuntime/labels.go) sets on every pod
// sandbox and container it creates, so that a bench lists what a node's
// runtime lists: nine map entries a container, where a bare config has
// none, make ListContainers three times as costly to encode and decode.
package kubeletshape

import (
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Pod sets cfg's labels and annotations as the kubelet's for a pod of a
// Deployment: the pod's own labels (app, pod-template-hash) and the
// kubelet's three, and the annotations the kubelet's config sources add.
func Pod(cfg *runtime.PodSandboxConfig) {
	m := cfg.GetMetadata()
	cfg.Labels = map[string]string{
		"app":                         m.GetName(),
		"pod-template-hash":           "6d4cf56db6",
		"io.kubernetes.pod.name":      m.GetName(),
		"io.kubernetes.pod.namespace": m.GetNamespace(),
		"io.kubernetes.pod.uid":       m.GetUid(),
	}
	cfg.Annotations = map[string]string{
		"kubernetes.io/config.seen":   "2026-11-30T05:30:00.000000000Z",
		"kubernetes.io/config.source": "api",
	}
}

// Container sets cfg's labels and annotations as the kubelet's for a
// container of pod, in its first run.
func Container(pod *runtime.PodSandboxConfig, cfg *runtime.ContainerConfig) {
	m := pod.GetMetadata()
	cfg.Labels = map[string]string{
		"io.kubernetes.container.name": cfg.GetMetadata().GetName(),
		"io.kubernetes.pod.name":       m.GetName(),
		"io.kubernetes.pod.namespace":  m.GetNamespace(),
		"io.kubernetes.pod.uid":        m.GetUid(),
	}
	cfg.Annotations = map[string]string{
		"io.kubernetes.container.hash":                     "a2b7c3d4",
		"io.kubernetes.container.restartCount":             "0",
		"io.kubernetes.container.terminationMessagePath":   "/dev/termination-log",
		"io.kubernetes.container.terminationMessagePolicy": "File",
		"io.kubernetes.pod.terminationGracePeriod":         "30",
	}
}
