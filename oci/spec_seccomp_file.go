package oci

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// seccompFile reads both forms a Localhost profile comes in: the runtime-spec
// LinuxSeccomp, and Docker's profile format (archMap; per-rule includes and
// excludes on capabilities, architectures and kernel version), which is what
// most published profiles and the security-profiles-operator use. The
// runtime-spec form is the Docker form without the extra fields.
type seccompFile struct {
	DefaultAction    specs.LinuxSeccompAction `json:"defaultAction"`
	DefaultErrnoRet  *uint                    `json:"defaultErrnoRet,omitempty"`
	Architectures    []specs.Arch             `json:"architectures"`
	ArchMap          []seccompArchMap         `json:"archMap"`
	Flags            []specs.LinuxSeccompFlag `json:"flags"`
	ListenerPath     string                   `json:"listenerPath"`
	ListenerMetadata string                   `json:"listenerMetadata"`
	Syscalls         []seccompFileSyscall     `json:"syscalls"`
}

type seccompArchMap struct {
	Architecture     specs.Arch   `json:"architecture"`
	SubArchitectures []specs.Arch `json:"subArchitectures"`
}

type seccompFileSyscall struct {
	Name     string                   `json:"name"` // Docker's older single-name form
	Names    []string                 `json:"names"`
	Action   specs.LinuxSeccompAction `json:"action"`
	ErrnoRet *uint                    `json:"errnoRet,omitempty"`
	Args     []specs.LinuxSeccompArg  `json:"args"`
	Includes seccompCondition         `json:"includes"`
	Excludes seccompCondition         `json:"excludes"`
}

// seccompCondition: Docker applies a rule when the container holds all of
// Includes.Caps, runs on one of Includes.Arches (Go names) and a kernel of at
// least MinKernel; and skips it when it holds any of Excludes.Caps or runs on
// one of Excludes.Arches.
type seccompCondition struct {
	Caps      []string `json:"caps"`
	Arches    []string `json:"arches"`
	MinKernel string   `json:"minKernel"`
}

var seccompActions = []specs.LinuxSeccompAction{
	specs.ActKill, specs.ActKillProcess, specs.ActKillThread, specs.ActTrap,
	specs.ActErrno, specs.ActTrace, specs.ActAllow, specs.ActLog, specs.ActNotify,
}

// maxSeccompProfile bounds the read of a node's profile file.
const maxSeccompProfile = 8 << 20

// loadSeccompProfile reads a Localhost profile; errors name the file.
func loadSeccompProfile(path string, caps capSet) (*specs.LinuxSeccomp, error) {
	if path == "" || !filepath.IsAbs(path) {
		return nil, fmt.Errorf("%w: seccomp localhost profile path %q must be absolute", ErrInvalid, path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: read seccomp profile %s: %v", ErrInvalid, path, err)
	}
	if len(data) > maxSeccompProfile {
		return nil, fmt.Errorf("%w: seccomp profile %s is larger than %d bytes", ErrInvalid, path, maxSeccompProfile)
	}
	var file seccompFile
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&file); err != nil {
		return nil, fmt.Errorf("%w: parse seccomp profile %s: %v", ErrInvalid, path, err)
	}
	profile, err := file.toSpec(caps, runtime.GOARCH, kernelRelease())
	if err != nil {
		return nil, fmt.Errorf("%w: seccomp profile %s: %v", ErrInvalid, path, err)
	}
	return profile, nil
}

func (f *seccompFile) toSpec(caps capSet, goarch, kernel string) (*specs.LinuxSeccomp, error) {
	if !slices.Contains(seccompActions, f.DefaultAction) {
		return nil, fmt.Errorf("defaultAction %q is not a seccomp action", f.DefaultAction)
	}
	out := &specs.LinuxSeccomp{
		DefaultAction:    f.DefaultAction,
		DefaultErrnoRet:  f.DefaultErrnoRet,
		Architectures:    f.architectures(goarch),
		Flags:            f.Flags,
		ListenerPath:     f.ListenerPath,
		ListenerMetadata: f.ListenerMetadata,
	}
	for i, sc := range f.Syscalls {
		names := sc.Names
		if sc.Name != "" {
			names = append([]string{sc.Name}, names...)
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("syscalls[%d] names no syscall", i)
		}
		if !slices.Contains(seccompActions, sc.Action) {
			return nil, fmt.Errorf("syscalls[%d] (%s): action %q is not a seccomp action", i, names[0], sc.Action)
		}
		if !sc.applies(caps, goarch, kernel) {
			continue
		}
		out.Syscalls = append(out.Syscalls, specs.LinuxSyscall{
			Names: names, Action: sc.Action, ErrnoRet: sc.ErrnoRet, Args: sc.Args,
		})
	}
	return out, nil
}

// architectures prefers the explicit list; else the archMap entry of this
// machine, with its sub-architectures.
func (f *seccompFile) architectures(goarch string) []specs.Arch {
	if len(f.Architectures) > 0 || len(f.ArchMap) == 0 {
		return f.Architectures
	}
	native, ok := nativeSeccompArch[goarch]
	if !ok {
		return nil
	}
	for _, m := range f.ArchMap {
		if m.Architecture == native {
			return append([]specs.Arch{m.Architecture}, m.SubArchitectures...)
		}
	}
	return nil
}

// nativeSeccompArch is the seccomp architecture of a Go GOARCH; an archMap
// entry names its compat architectures.
var nativeSeccompArch = map[string]specs.Arch{
	"amd64":   specs.ArchX86_64,
	"arm64":   specs.ArchAARCH64,
	"386":     specs.ArchX86,
	"arm":     specs.ArchARM,
	"ppc64le": specs.ArchPPC64LE,
	"s390x":   specs.ArchS390X,
	"riscv64": specs.ArchRISCV64,
}

func (sc *seccompFileSyscall) applies(caps capSet, goarch, kernel string) bool {
	for _, c := range sc.Includes.Caps {
		if n, err := normalizeCapability(c); err != nil || !caps.has(capabilityNumbers[n]) {
			return false
		}
	}
	if len(sc.Includes.Arches) > 0 && !slices.Contains(sc.Includes.Arches, goarch) {
		return false
	}
	if sc.Includes.MinKernel != "" && !kernelAtLeast(kernel, sc.Includes.MinKernel) {
		return false
	}
	for _, c := range sc.Excludes.Caps {
		if n, err := normalizeCapability(c); err == nil && caps.has(capabilityNumbers[n]) {
			return false
		}
	}
	return !slices.Contains(sc.Excludes.Arches, goarch)
}

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// kernelAtLeast compares "major.minor" prefixes of kernel releases such as
// "6.1.0-18-amd64". An unreadable release counts as new enough.
func kernelAtLeast(release, want string) bool {
	rMaj, rMin, ok := majorMinor(release)
	if !ok {
		return true
	}
	wMaj, wMin, ok := majorMinor(want)
	if !ok {
		return true
	}
	return rMaj > wMaj || (rMaj == wMaj && rMin >= wMin)
}

func majorMinor(release string) (major, minor int, ok bool) {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(leadingDigits(parts[1]))
	return major, minor, err1 == nil && err2 == nil
}

func leadingDigits(s string) string {
	end := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		return s
	}
	return s[:end]
}
