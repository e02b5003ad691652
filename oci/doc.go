// Package oci turns a container's configuration into an OCI runtime spec
// (config.json) and drives an OCI runtime (runc, crun) through its command line.
//
// The package knows the runtime-spec and the runtime's CLI; it does not know CRI.
// The server translates CRI messages into the plain types of this package and
// calls, for a new container:
//
//	args, err := oci.ResolveArgs(img.Entrypoint, img.Cmd, cfg.Command, cfg.Args)
//	user, err := oci.ResolveUser(rootfs, img.User, runAsUser, runAsUsername, runAsGroup, supplementalGroups)
//	spec, err := oci.GenerateSpec(oci.ContainerSpec{ID: id, Rootfs: rootfs, Args: args,
//		Env: oci.MergeEnv(img.Env, env), User: user, ...})
//	err = oci.WriteSpec(bundle, spec)
//
// The monitor (minicri-conmon) runs the runtime's create, reaps the container
// and reads its OOM kills; the daemon then calls Runtime.Start, State, Kill,
// Delete and Update, Exec (with ExecProcessSpec) for exec and ExecSync, and
// ReadCgroupStats and ReadPodCgroupStats for the cgroups' numbers. Each goes
// through the runtime's command line: its state directory is its own.
//
// Host facts that a spec depends on (the daemon's own oom_score_adj, RLIMIT_NOFILE
// and capability bounding set, the kernel's last capability, the cgroup mode,
// AppArmor) are read once per process and kept.
package oci
