// minicri-pause is the infra process of a pod whose containers share one PID
// namespace: PID 1 there, it holds the namespace, reaps the orphans its
// processes leave, and exits 0 on SIGTERM or SIGINT (SIGKILL, from the
// daemon, ends it and the namespace with it).
//
//	minicri-pause pause --pod DIR
//
// The arguments only label the process, as for `minicri-conmon pause`, for
// operators and for the daemon's start-up repair (conmon.FindPauses).
//
// It is C, built static, because it is one process per such pod and does
// nothing: the Go one (minicri-conmon pause) costs about 0.5 MiB of private
// memory for its runtime, this one a few pages (docs/performance.md).
#define _GNU_SOURCE
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static void ignore(int sig) { (void)sig; }

int main(void) {
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
	// Nothing of the daemon's stays open here (stdio is /dev/null).
	syscall(SYS_close_range, 3, ~0U, 0);
	// Outside a PID namespace of its own it still adopts the orphans below it.
	prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
	for (;;) {
		while (waitpid(-1, NULL, WNOHANG) > 0) {
		}
		int sig;
		if (sigwait(&set, &sig) == 0 && (sig == SIGTERM || sig == SIGINT)) {
			return 0;
		}
	}
}
