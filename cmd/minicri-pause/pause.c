// minicri-pause is the infra process of a pod whose containers share one PID
// namespace: PID 1 there, it holds the namespace, reaps the orphans its
// processes leave, and exits 0 on SIGTERM or SIGINT (SIGKILL, from the
// daemon, ends it and the namespace with it).
//
//	minicri-pause pause --pod DIR
//
// The arguments only label the process, for operators: the daemon finds
// its infra processes again from the record it writes in the pod dir
// (conmon.RecordedInfra), never from a command line, which anyone can forge.
//
// Before anything else it waits for one byte on fd 5 (GO_FD), which the
// daemon writes once it has recorded the process: a daemon killed before
// that closes the pipe with its death, and the process exits at once, so
// none runs unrecorded. Started by hand (no fd 5) it does not wait.
//
// Every container of the pod sees it as PID 1, and one given CAP_SYS_PTRACE
// can make it run any system call, so before it waits it confines itself
// (docs/security.md, "The pod infra process"), in this order, each step
// needing the privilege the one before has not dropped yet:
//
//  1. a mount namespace of its own whose only mount is an empty read-only
//     tmpfs (pivot_root into it, the host's tree detached);
//  1a. where the daemon names one (MINICRI_PAUSE_APPARMOR, on AppArmor
//     hosts: the pod's profile, minicri-default unless the pod says
//     otherwise), that AppArmor profile, changed to through the process's
//     attribute file opened before step 1 took /proc away; after the
//     mounts (the profile denies mount) and before no_new_privs;
//  2. the capability bounding set emptied;
//  3. no supplementary groups, gid and uid 65535 (as the kubelet's pause
//     image; in a pod's user namespace, the ID mapped to 65535 there),
//     which empties the permitted and effective sets; the ambient and
//     inheritable sets cleared too, and checked empty;
//  4. no_new_privs, and not dumpable;
//  5. last, a seccomp filter that allows only the system calls it makes
//     afterwards and kills it on any other.
//
// A step that fails ends it with exit code 1 and a message on stderr. Once
// confined it writes "ready\n" on fd 3 and closes every descriptor: the
// daemon, which gives it one pipe as both stderr and fd 3, reads that pipe
// to EOF before it lets a container into the namespace (conmon.startPause).
//
// It is C, built static, because it is one process per such pod and does
// nothing: a Go one would cost about 0.5 MiB of private memory for its
// runtime, this one a few pages (docs/performance.md).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

// The unprivileged IDs it runs as, as the kubelet's pause image.
#define PAUSE_ID 65535

// The daemon's end of the readiness pipe.
#define READY_FD 3
#define READY "ready\n"

// The pipe the daemon writes one byte on once it has recorded the process
// (conmon.pauseGoFD), after fd 4, the sealed copy (conmon.pauseExecFD).
#define GO_FD 5

#if defined(__x86_64__)
#define PAUSE_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define PAUSE_AUDIT_ARCH AUDIT_ARCH_AARCH64
#else
#error "minicri-pause: no seccomp filter for this architecture"
#endif

static void fail(const char *step) {
	fprintf(stderr, "minicri-pause: %s: %s\n", step, strerror(errno));
	_exit(1);
}

static void ignore(int sig) { (void)sig; }

// The AppArmor attribute file, opened while /proc is there, and the
// profile to change to; -1 and NULL without one.
static int appArmorFD = -1;
static const char *appArmorProfile;

// openAppArmor opens the process's own AppArmor attribute: the
// LSM-specific file where the kernel has it (5.8), else the shared one.
static void openAppArmor(void) {
	appArmorProfile = getenv("MINICRI_PAUSE_APPARMOR");
	if (appArmorProfile == NULL || appArmorProfile[0] == '\0') {
		appArmorProfile = NULL;
		return;
	}
	appArmorFD = open("/proc/thread-self/attr/apparmor/current", O_WRONLY | O_CLOEXEC);
	if (appArmorFD < 0) {
		appArmorFD = open("/proc/self/attr/current", O_WRONLY | O_CLOEXEC);
	}
	if (appArmorFD < 0) {
		fail("open the AppArmor attribute");
	}
}

// changeAppArmor moves the process into the profile for good (a confined
// process cannot leave it).
static void changeAppArmor(void) {
	if (appArmorProfile == NULL) {
		return;
	}
	char cmd[512];
	int n = snprintf(cmd, sizeof(cmd), "changeprofile %s", appArmorProfile);
	if (n < 0 || (size_t)n >= sizeof(cmd)) {
		errno = ENAMETOOLONG;
		fail("change to the AppArmor profile");
	}
	if (write(appArmorFD, cmd, (size_t)n) != n) {
		fail("change to the AppArmor profile");
	}
	close(appArmorFD);
	appArmorFD = -1;
}

// isolateMounts leaves the process a mount namespace with one empty
// read-only tmpfs in it. The tmpfs goes on /proc, which every root has, of
// the namespace's private copy of the host's tree; pivot_root(".", ".")
// stacks the old root on the new one, and the lazy unmount detaches it, and
// with it every mount of the host.
static void isolateMounts(void) {
	if (unshare(CLONE_NEWNS) != 0) {
		fail("unshare the mount namespace");
	}
	// Nothing done below propagates to the host, nor the host's to here.
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
		fail("make / private");
	}
	if (mount("tmpfs", "/proc", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,nr_inodes=4,mode=0555") != 0) {
		fail("mount the tmpfs root");
	}
	if (chdir("/proc") != 0) {
		fail("chdir into the tmpfs root");
	}
	if (syscall(SYS_pivot_root, ".", ".") != 0) {
		fail("pivot_root");
	}
	if (umount2(".", MNT_DETACH) != 0) {
		fail("detach the host's mounts");
	}
	if (chdir("/") != 0) {
		fail("chdir /");
	}
	if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0) {
		fail("remount the root read-only");
	}
}

// dropPrivileges empties every capability set for good and takes the
// unprivileged IDs. The bounding set goes first: emptying it needs
// CAP_SETPCAP, which the change of uid drops.
static void dropPrivileges(void) {
	for (int cap = 0;; cap++) {
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) {
			if (errno == EINVAL && cap > 0) {
				break; // past the kernel's last capability
			}
			fail("drop the capability bounding set");
		}
	}
	if (setgroups(0, NULL) != 0) {
		fail("clear the supplementary groups");
	}
	if (setresgid(PAUSE_ID, PAUSE_ID, PAUSE_ID) != 0) {
		fail("set gid 65535");
	}
	// From uid 0 to none 0, the permitted and effective sets are emptied.
	if (setresuid(PAUSE_ID, PAUSE_ID, PAUSE_ID) != 0) {
		fail("set uid 65535");
	}
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) {
		fail("clear the ambient capabilities");
	}
	struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {0};
	if (syscall(SYS_capset, &hdr, data) != 0) {
		fail("clear the capability sets");
	}
	if (syscall(SYS_capget, &hdr, data) != 0) {
		fail("read the capability sets");
	}
	for (int i = 0; i < _LINUX_CAPABILITY_U32S_3; i++) {
		if (data[i].effective || data[i].permitted || data[i].inheritable) {
			errno = EPERM;
			fail("capabilities left after the drop");
		}
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
		fail("set no_new_privs");
	}
	// Not dumpable: a process of the pod without CAP_SYS_PTRACE cannot
	// open its /proc files (root, fd, mem) even under the same uid.
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
		fail("clear dumpable");
	}
}

#define ALLOW(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)

// installSeccomp allows the system calls that main makes after it (the
// readiness write, on READY_FD only, the close of every descriptor, the
// loop), and the kernel's restart of an interrupted one; anything else, or
// another architecture's calls, kills the process.
static void installSeccomp(void) {
	struct sock_filter filter[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PAUSE_AUDIT_ARCH, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		ALLOW(__NR_rt_sigtimedwait),
		ALLOW(__NR_wait4),
		ALLOW(__NR_close_range),
		ALLOW(__NR_restart_syscall),
		ALLOW(__NR_rt_sigreturn),
		ALLOW(__NR_exit_group),
		ALLOW(__NR_exit),
		// write(READY_FD, ...): the kernel takes the fd as 32 bits, the
		// low word of the argument on both (little-endian) architectures.
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_write, 0, 3),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, READY_FD, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
	};
	struct sock_fprog prog = {.len = sizeof(filter) / sizeof(filter[0]), .filter = filter};
	if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) {
		fail("install the seccomp filter");
	}
}

// awaitRecord blocks until the daemon has recorded this process: one byte
// on GO_FD. EOF means the daemon died (or gave up) first: exit, unrecorded
// and so unfindable otherwise.
static void awaitRecord(void) {
	char go;
	ssize_t n;
	do {
		n = read(GO_FD, &go, 1);
	} while (n < 0 && errno == EINTR);
	if (n == 1 || (n < 0 && errno == EBADF)) {
		return;
	}
	if (n == 0) {
		errno = EPIPE;
	}
	fail("wait for the daemon's record");
}

int main(void) {
	awaitRecord();
	// Nothing of the daemon's stays open here but stdio and the readiness
	// pipe: fd 4, the sealed copy the daemon exec'd this from
	// (conmon/pause_sealed.go), and the go pipe go too.
	syscall(SYS_close_range, READY_FD + 1, ~0U, 0);
	// Exec'd as /proc/self/fd/4, it would be named "4" in ps.
	prctl(PR_SET_NAME, "minicri-pause", 0, 0, 0);
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	// Blocked and taken by sigwait. As PID 1 the process gets only the
	// signals it has a handler for, hence the handlers that never run.
	sigprocmask(SIG_BLOCK, &set, NULL);
	struct sigaction sa = {.sa_handler = ignore};
	sigaction(SIGCHLD, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	// Outside a PID namespace of its own it still adopts the orphans below it.
	prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
	openAppArmor();
	isolateMounts();
	changeAppArmor();
	dropPrivileges();
	installSeccomp();
	// Confined. Started by hand (no fd 3) it has nobody to tell.
	if (write(READY_FD, READY, sizeof(READY) - 1) < 0 && errno != EBADF) {
		_exit(1);
	}
	syscall(SYS_close_range, 0, ~0U, 0);
	for (;;) {
		while (waitpid(-1, NULL, WNOHANG) > 0) {
		}
		int sig;
		if (sigwait(&set, &sig) == 0 && (sig == SIGTERM || sig == SIGINT)) {
			_exit(0);
		}
	}
}
