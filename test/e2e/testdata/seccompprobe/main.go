// Command seccompprobe makes the syscalls that the e2e seccomp test names on
// its command line and prints one line for each: "NAME: ok" or "NAME: ERROR".
// busybox has no applet for them. It is built static (CGO_ENABLED=0) and
// bind-mounted into a container.
package main

import (
	"fmt"
	"os"
	"syscall"
)

const (
	perLinux        = 0x0
	addrNoRandomize = 0x0040000
)

var probes = map[string]func() syscall.Errno{
	// Allowed by the default profile: the plain Linux personality.
	"personality-linux": func() syscall.Errno {
		_, _, e := syscall.RawSyscall(syscall.SYS_PERSONALITY, perLinux, 0, 0)
		return e
	},
	// Refused by it: turning address space randomization off.
	"personality-addr-no-randomize": func() syscall.Errno {
		_, _, e := syscall.RawSyscall(syscall.SYS_PERSONALITY, addrNoRandomize, 0, 0)
		return e
	},
	// A NUMA call: refused without CAP_SYS_NICE.
	"get_mempolicy": func() syscall.Errno {
		_, _, e := syscall.RawSyscall6(syscall.SYS_GET_MEMPOLICY, 0, 0, 0, 0, 0, 0)
		return e
	},
}

func main() {
	for _, name := range os.Args[1:] {
		probe, ok := probes[name]
		if !ok {
			fmt.Printf("%s: unknown probe\n", name)
			os.Exit(2)
		}
		if errno := probe(); errno != 0 {
			fmt.Printf("%s: %v\n", name, errno)
		} else {
			fmt.Printf("%s: ok\n", name)
		}
	}
}
