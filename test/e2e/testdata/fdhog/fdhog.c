/* fdhog: a pod that holds millions of file descriptors. It forks into
 * PROCS processes; each dups /dev/null onto every descriptor its
 * RLIMIT_NOFILE allows, prints "held N" and waits to be killed. Forked,
 * not exec'd: the processes share their pages, and cost the kernel little
 * more than their descriptor tables (8 bytes a descriptor). */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

int main(int argc, char **argv) {
	int procs = argc > 1 ? atoi(argv[1]) : 1;
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return 1;
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	int fd = open("/dev/null", O_RDONLY);
	if (fd < 0)
		return 1;
	for (int i = 1; i < procs; i++)
		if (fork() == 0) {
			/* Gone with the first, whatever PID namespace they share. */
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			break;
		}
	long held = 0;
	for (long n = fd + 1; n < (long)rl.rlim_cur; n++)
		if (dup2(fd, (int)n) >= 0)
			held++;
	printf("held %ld\n", held + 1);
	fflush(stdout);
	for (;;)
		pause();
}
