package monitor

import (
	"bytes"
	"strconv"

	"golang.org/x/sys/unix"
)

// dropReadOnlyData unmaps the binary's read-only data (type data, function
// tables, strings) from the process. Start-up and a join read much of it;
// a monitor that waits for output reads next to none. Every page of the
// file that happens to be in the page cache near a fault is mapped along
// with it (the kernel's fault-around), so without this much of the binary
// stays mapped and counts in the monitor's PSS, for the whole life of its
// containers. The pages stay in the page cache; a later read
// maps again what it needs, with a minor fault. Text is left alone: what
// the loop runs is spread over all of it. buf is scratch space.
func dropReadOnlyData(buf []byte) {
	var exe unix.Stat_t
	if unix.Stat("/proc/self/exe", &exe) != nil {
		return
	}
	maps := readInto("/proc/self/maps", buf)
	for len(maps) > 0 {
		var line []byte
		line, maps, _ = bytes.Cut(maps, []byte{'\n'})
		start, end, ino, ok := readOnlyMapping(line)
		if !ok || ino != exe.Ino {
			continue
		}
		// The raw call: the range is not Go memory, and no slice of it is
		// ever made.
		unix.Syscall(unix.SYS_MADVISE, start, end-start, unix.MADV_DONTNEED)
	}
}

// readOnlyMapping reads a line of /proc/self/maps, "start-end perms offset
// dev inode path", the first five fields one space apart, and returns the
// range and the file's inode of an r--p mapping. Nothing is allocated: this
// runs after every join, and what a monitor allocates stays.
func readOnlyMapping(line []byte) (start, end uintptr, ino uint64, ok bool) {
	span, rest, _ := bytes.Cut(line, []byte{' '})
	perms, rest, _ := bytes.Cut(rest, []byte{' '})
	_, rest, _ = bytes.Cut(rest, []byte{' '}) // offset
	_, rest, _ = bytes.Cut(rest, []byte{' '}) // dev
	inode, _, _ := bytes.Cut(rest, []byte{' '})
	lo, hi, found := bytes.Cut(span, []byte{'-'})
	if !found || string(perms) != "r--p" {
		return 0, 0, 0, false
	}
	s, err1 := strconv.ParseUint(string(lo), 16, 64)
	e, err2 := strconv.ParseUint(string(hi), 16, 64)
	ino, err3 := strconv.ParseUint(string(inode), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || s == 0 || e <= s {
		return 0, 0, 0, false
	}
	return uintptr(s), uintptr(e), ino, true
}

// readInto reads a small file into buf with plain system calls, and
// returns what fit.
func readInto(path string, buf []byte) []byte {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	n := 0
	for n < len(buf) {
		r, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if r <= 0 || err != nil {
			break
		}
		n += r
	}
	return buf[:n]
}
