package server

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/sirupsen/logrus"

	"github.com/minicri/minicri/config"
	"github.com/minicri/minicri/oci"
)

// useRuntimes makes the OCI runtime of each configured handler and settles
// which is the default, once, at start.
func (s *Server) useRuntimes() {
	s.startRuntimes()()
}

// startRuntimes makes the OCI runtime of each configured handler and starts
// the probes that choose the default; settle waits for them and settles it.
// A start runs its recovery between the two: the probes are processes
// and the recovery needs no default, only the handlers its records name.
func (s *Server) startRuntimes() (settle func()) {
	handlers := runtimeHandlers(s.cfg, s.monitorPath)
	s.runtimes = ociHandlers{handlers}
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		probeCandidates(s.runtimes)
	}()
	return func() {
		<-probed
		handlers.Default = chooseDefaultHandler(s.cfg.Runtime, s.runtimes, s.log)
		s.cfg.Runtime.DefaultHandler = handlers.Default
		warnMissingFixes(s.log, s.runtimes, handlers.Default)
	}
}

// probeCandidates runs `features` of every runc handler at once: each is a
// process start of its own, and a restart answers no CRI call
// until the default is chosen. Each runtime keeps its answer.
func probeCandidates(runtimes runtimeSet) {
	var wg sync.WaitGroup
	for _, name := range defaultCandidates(runtimes) {
		rt, err := runtimes.Get(name)
		if err != nil || rt.Available() != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = rt.Features()
		}()
	}
	wg.Wait()
}

// chooseDefaultHandler is the handler a pod without a RuntimeClass runs on:
// runtime.default_handler when the operator named one, else the most capable
// runc among the handlers whose binary is named runc; a runc with the 2025
// security fixes (oci.MissingRuncFixes) before any without them, whatever
// it can do. containerd 2.x and
// cri-o run pods with hostUsers: false on their default handler, while
// Debian's runc 1.1.5 cannot idmap mounts; where make deps built a current
// runc, the default is that one. Each candidate runs `features` here, once:
// the runtime keeps the answer, so Status and every create read it from
// memory.
func chooseDefaultHandler(cfg config.RuntimeConfig, runtimes runtimeSet, log logrus.FieldLogger) string {
	if cfg.DefaultHandler != "" {
		return cfg.DefaultHandler
	}
	best, bestScore := "", -1
	for _, name := range defaultCandidates(runtimes) {
		rt, err := runtimes.Get(name)
		if err != nil {
			continue
		}
		score := handlerScore(rt)
		if score > bestScore {
			best, bestScore = name, score
		}
	}
	if best == "" {
		best = fallbackHandler(runtimes.Names())
	}
	logDefaultHandler(log, runtimes, best)
	return best
}

// defaultCandidates lists the handlers whose binary is a runc, the handler
// named runc first (it wins a tie), the others by name.
func defaultCandidates(runtimes runtimeSet) []string {
	var out []string
	for _, name := range runtimes.Names() {
		rt, err := runtimes.Get(name)
		if err != nil {
			continue
		}
		bin, err := rt.Binary()
		if err != nil || filepath.Base(bin) != "runc" {
			continue
		}
		out = append(out, name)
	}
	slices.SortStableFunc(out, func(a, b string) int {
		switch {
		case a == b:
			return 0
		case a == config.DistroRuncHandler:
			return -1
		case b == config.DistroRuncHandler:
			return 1
		}
		return 0 // Names is sorted already
	})
	return out
}

// handlerScore ranks a runtime: a missing binary never wins; a runc with
// the security fixes outranks every runtime without them (or that does not
// say); then idmapped mounts (user namespaces) count before recursive
// read-only mounts.
func handlerScore(rt runtimeProbe) int {
	if rt.Available() != nil {
		return -1
	}
	f, err := rt.Features()
	score := 0
	if f.HasFixes() {
		score += 4
	}
	if err != nil {
		return score
	}
	if f.IDMappedMounts {
		score += 2
	}
	if f.RecursiveReadOnly {
		score++
	}
	return score
}

// fallbackHandler is the default when no handler runs a runc at all (a
// file that names only crun, say): the handler named runc if there is one,
// else the first by name.
func fallbackHandler(names []string) string {
	if slices.Contains(names, config.DistroRuncHandler) || len(names) == 0 {
		return config.DistroRuncHandler
	}
	return names[0]
}

// warnMissingFixes names, once at start, every handler whose runc lacks
// the 2025 security fixes (Status says it too, in its info). They stay
// usable by RuntimeClass; the operator who named one as the default has
// chosen it, and is told.
func warnMissingFixes(log logrus.FieldLogger, runtimes runtimeSet, defaultHandler string) {
	for _, name := range defaultCandidates(runtimes) {
		rt, err := runtimes.Get(name)
		if err != nil || rt.Available() != nil {
			continue
		}
		f, _ := rt.Features()
		missing := f.MissingFixes()
		if len(missing) == 0 {
			continue
		}
		log.WithFields(logrus.Fields{
			"handler": name, "runc_version": f.RuncVersion, "missing_fixes": strings.Join(missing, ","),
			"default": name == defaultHandler, "fixed_in": oci.RuncFixedIn,
		}).Warn("runtime handler's runc lacks security fixes for container escapes; install a fixed runc (make deps builds one as " + config.CurrentRuncHandler + ")")
	}
}

// logDefaultHandler says which handler was chosen and why, once at start.
func logDefaultHandler(log logrus.FieldLogger, runtimes runtimeSet, name string) {
	fields := logrus.Fields{"handler": name}
	if rt, err := runtimes.Get(name); err == nil {
		if bin, err := rt.Binary(); err == nil {
			fields["binary"] = bin
		}
		f, err := rt.Features()
		if err != nil {
			fields["features"] = err.Error()
		} else {
			fields["user_namespaces"] = f.IDMappedMounts
			fields["recursive_read_only_mounts"] = f.RecursiveReadOnly
		}
		if f.RuncVersion != "" {
			fields["runc_version"] = f.RuncVersion
		}
	}
	log.WithFields(fields).Info("default runtime handler chosen (runtime.default_handler is empty)")
}

// RuntimeReport is what `minicri version` says of the OCI runtimes cfg
// configures, one line each: the handler, whether a start would choose it
// as the default, its binary, its runc version and the security fixes that
// version lacks. Each runtime runs `features` (or --version) once; nothing
// is kept.
func RuntimeReport(cfg config.Config) []string {
	h := runtimeHandlers(cfg, "")
	for _, rt := range h.Runtimes {
		rt.FeaturesCache = ""
	}
	runtimes := ociHandlers{h}
	probeCandidates(runtimes)
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	defaultHandler := chooseDefaultHandler(cfg.Runtime, runtimes, quiet)
	var lines []string
	for _, name := range runtimes.Names() {
		rt, err := runtimes.Get(name)
		if err != nil {
			continue
		}
		line := "runtime handler " + name
		if name == defaultHandler {
			line += " (default)"
		}
		if err := rt.Available(); err != nil {
			lines = append(lines, line+": not installed")
			continue
		}
		bin, _ := rt.Binary()
		line += ": " + bin
		f, _ := rt.Features()
		if f.RuncVersion != "" {
			line += ", runc " + f.RuncVersion
		}
		if missing := f.MissingFixes(); len(missing) > 0 {
			line += fmt.Sprintf(", LACKS the security fixes of %s (fixed in %s; make deps builds one as %s)",
				strings.Join(missing, ", "), oci.RuncFixedIn, config.CurrentRuncHandler)
		}
		lines = append(lines, line)
	}
	return lines
}
