// ptraceprobe attacks a process with ptrace, as a container given
// CAP_SYS_PTRACE can its pod's PID 1: it attaches, stops it in its system
// call, and makes it run openat (and read) of a path of the attacker's
// choosing, with the target's credentials and in its mount namespace.
//
//	ptraceprobe PID read PATH    prints "content: ..." when the target read PATH
//	ptraceprobe PID create PATH  prints "created: FD" when it created PATH
//
// Each step is printed as it happens: a target whose seccomp filter kills
// it on the injected call ends, if it is PID 1, the prober with it.
// x86_64 only (isolation_infra_test.go skips elsewhere).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

static pid_t target;

static void die(const char *what) {
	printf("%s: %s\n", what, strerror(errno));
	exit(2);
}

// inject makes the target run one system call from the syscall
// instruction at insn, and returns its result.
static long inject(const struct user_regs_struct *saved, unsigned long insn, long nr, long a, long b, long c, long d) {
	struct user_regs_struct r = *saved;
	r.rip = insn;
	r.rax = nr;
	r.orig_rax = -1; // no restart of the interrupted call on resume
	r.rdi = a;
	r.rsi = b;
	r.rdx = c;
	r.r10 = d;
	if (ptrace(PTRACE_SETREGS, target, 0, &r) != 0) {
		die("setregs");
	}
	if (ptrace(PTRACE_SINGLESTEP, target, 0, 0) != 0) {
		die("singlestep");
	}
	int st;
	if (waitpid(target, &st, __WALL) < 0) {
		die("waitpid");
	}
	if (WIFSIGNALED(st) || WIFEXITED(st)) {
		printf("target ended: status %#x\n", st);
		exit(3);
	}
	if (ptrace(PTRACE_GETREGS, target, 0, &r) != 0) {
		die("getregs after the call");
	}
	return (long)r.rax;
}

static void poke(unsigned long addr, const char *s) {
	size_t n = strlen(s) + 1;
	for (size_t i = 0; i < n; i += sizeof(long)) {
		long word = 0;
		memcpy(&word, s + i, n - i < sizeof(long) ? n - i : sizeof(long));
		if (ptrace(PTRACE_POKEDATA, target, addr + i, word) != 0) {
			die("pokedata");
		}
	}
}

int main(int argc, char **argv) {
	if (argc != 4) {
		fprintf(stderr, "usage: ptraceprobe PID read|create PATH\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IONBF, 0);
	target = atoi(argv[1]);
	int create = strcmp(argv[2], "create") == 0;
	// SEIZE and INTERRUPT: the SIGSTOP of PTRACE_ATTACH never reaches the
	// PID 1 of a namespace from inside it.
	if (ptrace(PTRACE_SEIZE, target, 0, 0) != 0) {
		die("seize");
	}
	printf("attached\n");
	if (ptrace(PTRACE_INTERRUPT, target, 0, 0) != 0) {
		die("interrupt");
	}
	int st;
	if (waitpid(target, &st, __WALL) < 0) {
		die("waitpid");
	}
	struct user_regs_struct saved;
	if (ptrace(PTRACE_GETREGS, target, 0, &saved) != 0) {
		die("getregs");
	}
	// Stopped in a system call: the syscall instruction (0f 05) is just
	// before its instruction pointer.
	unsigned long insn = saved.rip - 2;
	errno = 0;
	long text = ptrace(PTRACE_PEEKTEXT, target, insn, 0);
	if (errno != 0 || (text & 0xffff) != 0x050f) {
		printf("no syscall instruction at %#lx (%#lx)\n", insn, text);
		return 2;
	}
	// Scratch memory on its stack, well below what it uses.
	unsigned long scratch = (saved.rsp - 8192) & ~15UL;
	poke(scratch, argv[3]);
	printf("injecting openat\n");
	long fd = inject(&saved, insn, SYS_openat, AT_FDCWD, scratch,
	                 create ? O_WRONLY | O_CREAT | O_EXCL : O_RDONLY, 0644);
	printf("openat: %ld\n", fd);
	if (fd >= 0 && create) {
		printf("created: %ld\n", fd);
	}
	if (fd >= 0 && !create) {
		unsigned long buf = scratch + 4096;
		long n = inject(&saved, insn, SYS_read, fd, buf, 64, 0);
		char content[72] = {0};
		for (long i = 0; i < n && i < 64; i += sizeof(long)) {
			long word = ptrace(PTRACE_PEEKDATA, target, buf + i, 0);
			memcpy(content + i, &word, sizeof(long));
		}
		printf("content: %s\n", content);
	}
	if (fd >= 0) {
		inject(&saved, insn, SYS_close, fd, 0, 0, 0);
	}
	ptrace(PTRACE_SETREGS, target, 0, &saved);
	ptrace(PTRACE_DETACH, target, 0, 0);
	return 0;
}
