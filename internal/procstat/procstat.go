// Package procstat reads the few fields of /proc/PID/stat that minicri
// needs: whether a process is still alive, its session, and when it started
// (which tells a process from a later one that reused its pid).
package procstat

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// Stat is the part of /proc/PID/stat minicri reads.
type Stat struct {
	PID     int
	State   byte // R, S, D, Z, X, ...
	Session int
	// StartTime is when the process started, in clock ticks since boot.
	StartTime uint64
}

// Live is false for a zombie or a dead process.
func (s Stat) Live() bool { return s.State != 'Z' && s.State != 'X' }

// Read reads and parses /proc/PID/stat.
func Read(pid int) (Stat, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, err
	}
	return Parse(data)
}

// Live is false for a process that is gone or a zombie.
func Live(pid int) bool {
	s, err := Read(pid)
	return err == nil && s.Live()
}

// Parse parses the content of a /proc/PID/stat file. The command name
// (field 2) may hold spaces and parentheses, so the fields are counted from
// its last closing parenthesis.
func Parse(data []byte) (Stat, error) {
	open := bytes.IndexByte(data, ' ')
	end := bytes.LastIndexByte(data, ')')
	if open < 0 || end < open {
		return Stat{}, fmt.Errorf("/proc stat %q: no command name", truncate(data))
	}
	pid, err := strconv.Atoi(string(data[:open]))
	if err != nil {
		return Stat{}, fmt.Errorf("/proc stat: pid: %w", err)
	}
	// After the name: state(3) ppid(4) pgrp(5) session(6) ... starttime(22).
	fields := bytes.Fields(data[end+1:])
	if len(fields) < 20 {
		return Stat{}, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(fields))
	}
	session, err := strconv.Atoi(string(fields[3]))
	if err != nil {
		return Stat{}, fmt.Errorf("/proc/%d/stat: session: %w", pid, err)
	}
	start, err := strconv.ParseUint(string(fields[19]), 10, 64)
	if err != nil {
		return Stat{}, fmt.Errorf("/proc/%d/stat: start time: %w", pid, err)
	}
	return Stat{PID: pid, State: fields[0][0], Session: session, StartTime: start}, nil
}

// EachCmdline calls fn with the pid and the command line (arguments ending
// in NUL) of every process; one that ends meanwhile is skipped. Tests find
// their processes with it; the daemon decides nothing by a command line,
// which anyone can forge.
func EachCmdline(fn func(pid int, cmdline string)) {
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + d.Name() + "/cmdline")
		if err != nil {
			continue
		}
		fn(pid, string(cmdline))
	}
}

func truncate(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}
