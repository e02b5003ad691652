// forgedpause waits forever, whatever its command line: run as
// `minicri-pause pause --pod RUN_DIR/pods/ID`, it is what a pod or a host
// user can make to look like a pod's infra process to anything that goes
// by command lines (TestInfraForgedCommandLineKillsNothing).
#include <unistd.h>

int main(void) {
	for (;;) {
		pause();
	}
}
