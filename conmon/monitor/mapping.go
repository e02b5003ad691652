package monitor

import (
	"bytes"

	"golang.org/x/sys/unix"
)

// dropReadOnlyData unmaps the binary's read-only data (type data, function
// tables, strings) from the process. Start-up and a join read much of it;
// a monitor that waits for output reads next to none. Every page of the
// file that happens to be in the page cache near a fault is mapped along
// with it (the kernel's fault-around), so without this about 900 KiB of
// the binary stay mapped and count in the monitor's PSS, for the whole
// life of its containers. The pages stay in the page cache; a later read
// maps again what it needs, with a minor fault. Text is left alone: what
// the loop runs is spread over all of it. buf is scratch space.
func dropReadOnlyData(buf []byte) {
	var exe unix.Stat_t
	if unix.Stat("/proc/self/exe", &exe) != nil {
		return
	}
	maps := readInto("/proc/self/maps", buf)
	for len(maps) > 0 {
		line := maps
		if i := bytes.IndexByte(maps, '\n'); i >= 0 {
			line, maps = maps[:i], maps[i+1:]
		} else {
			maps = nil
		}
		// start-end perms offset dev inode path
		var f [6][]byte
		if fields(line, f[:]) < len(f) || string(f[1]) != "r--p" || parseUint(f[4], 10) != exe.Ino {
			continue
		}
		lo, hi, ok := bytes.Cut(f[0], []byte{'-'})
		start, end := uintptr(parseUint(lo, 16)), uintptr(parseUint(hi, 16))
		if !ok || start == 0 || end <= start {
			continue
		}
		// The raw call: the range is not Go memory, and no slice of it is
		// ever made.
		unix.Syscall(unix.SYS_MADVISE, start, end-start, unix.MADV_DONTNEED)
	}
}

// fields splits line at runs of spaces into f, as bytes.Fields would
// without making a slice: this runs after every join, and what a monitor
// allocates stays. It returns how many of f it filled.
func fields(line []byte, f [][]byte) int {
	n := 0
	for n < len(f) {
		line = bytes.TrimLeft(line, " ")
		if len(line) == 0 {
			break
		}
		end := bytes.IndexByte(line, ' ')
		if end < 0 {
			end = len(line)
		}
		f[n], line = line[:end], line[end:]
		n++
	}
	return n
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

// parseUint parses digits of the base; anything else gives 0.
func parseUint(b []byte, base uint64) uint64 {
	var n uint64
	for _, c := range b {
		var d uint64
		switch {
		case c >= '0' && c <= '9':
			d = uint64(c - '0')
		case c >= 'a' && c <= 'f' && base == 16:
			d = uint64(c-'a') + 10
		default:
			return 0
		}
		n = n*base + d
	}
	return n
}
