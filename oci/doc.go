// Package oci turns a container's configuration into an OCI runtime spec
// (config.json) and drives an OCI runtime (runc, crun) through its command line.
//
// The package knows the runtime-spec and the runtime's CLI; it does not know CRI.
// The server translates CRI messages into the plain types of this package
// (ContainerSpec, Security, Resources, Mount, Device, Namespaces) and calls
// GenerateSpec, WriteSpec and the Runtime methods.
//
// Host facts that a spec depends on (the daemon's own oom_score_adj and
// RLIMIT_NOFILE, the kernel's last capability, the cgroup mode, AppArmor) are
// read once per process and kept.
package oci
