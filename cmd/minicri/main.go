// Command minicri is a Kubernetes container runtime: a CRI server on a unix
// socket that runs pods and containers with an OCI runtime (runc by default).
// With no subcommand it runs the daemon; the subcommands are for operators.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"github.com/minicri/minicri/config"
	"github.com/minicri/minicri/server"
)

// version is set at build time: -ldflags "-X main.version=..."
var version = "0.1.0-dev"

const intro = `minicri is a small Kubernetes container runtime (CRI) for Linux nodes.

Usage:
  minicri [flags]            run the daemon (as root); point the kubelet's
                             --container-runtime-endpoint at unix://LISTEN
  minicri config [flags]     print the effective configuration as a commented TOML file
                             (with no flags: the built-in defaults, a file to start from)
  minicri image import [flags] FILE
                             add the images of an OCI layout tar or a docker save tar
                             to the store under --root (safe while the daemon runs)
  minicri image export [flags] REF... FILE
                             write images to an archive (OCI layout + docker save)
  minicri image list [flags] list the images of the store under --root
  minicri version [flags]    print the version, and each runtime handler's runc
                             with the security fixes it lacks (also: minicri --version)
  minicri help               this text

Configuration comes from defaults, then the file given by --config (default
` + config.DefaultPath + `), then flags; flags win. Every scalar key of
the file has a flag of the same name with dashes: run_dir → --run-dir,
streaming.port → --streaming-port. Tables of named entries (runtime handlers,
registry mirrors) are set in the file only.

Flags:
`

func main() {
	// No heap profile unless the profile endpoint is on (runDaemon): its
	// sampling keeps a table of allocation stacks, which grows with the
	// pods, for a profile nobody could fetch.
	runtime.MemProfileRate = 0
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches a command line and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	cmd := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version") && cmd == "" {
		cmd, args = "version", args[1:]
	}
	switch cmd {
	case "":
		return runDaemonCommand(args, stderr)
	case "config":
		return runConfigCommand(args, stdout, stderr)
	case "image":
		return runImageCommand(args, stdout, stderr)
	case "version":
		return runVersionCommand(args, stdout, stderr)
	case "help":
		fs, _ := newFlagSet(stderr)
		fs.SetOutput(stdout)
		fs.Usage()
		return 0
	default:
		fmt.Fprintf(stderr, "minicri: unknown command %q (try minicri --help)\n", cmd)
		return 2
	}
}

// newFlagSet makes the flag set shared by the daemon and `minicri config`.
func newFlagSet(out io.Writer) (*flag.FlagSet, *config.Flags) {
	fs := flag.NewFlagSet("minicri", flag.ContinueOnError)
	fs.SetOutput(out)
	var flags config.Flags
	flags.Register(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), intro)
		fs.VisitAll(func(f *flag.Flag) {
			name, usage := flag.UnquoteUsage(f)
			fmt.Fprintf(fs.Output(), "  --%s %s\n    \t%s\n", f.Name, name, usage)
		})
	}
	return fs, &flags
}

// parseConfig parses flags and loads the configuration they point at.
// ok=false means the caller should exit with code.
func parseConfig(args []string, stderr io.Writer) (cfg config.Config, code int, ok bool) {
	cfg, _, code, ok = parseConfigFlags(args, stderr)
	return cfg, code, ok
}

// parseConfigFlags is parseConfig that also returns the parsed flags, whose
// Load reads the configuration again (SIGHUP).
func parseConfigFlags(args []string, stderr io.Writer) (cfg config.Config, flags *config.Flags, code int, ok bool) {
	fs, flags := newFlagSet(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, nil, 0, false
		}
		return cfg, nil, 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "minicri: unexpected argument %q (try minicri --help)\n", fs.Arg(0))
		return cfg, nil, 2, false
	}
	cfg, err := flags.Load()
	if err != nil {
		fmt.Fprintf(stderr, "minicri: %v\n", err)
		return cfg, nil, 1, false
	}
	return cfg, flags, 0, true
}

func runConfigCommand(args []string, stdout, stderr io.Writer) int {
	cfg, code, ok := parseConfig(args, stderr)
	if !ok {
		return code
	}
	fmt.Fprint(stdout, config.Render(cfg, config.ThisNode()))
	return 0
}

func runDaemonCommand(args []string, stderr io.Writer) int {
	defer catchSIGHUP()()
	cfg, flags, code, ok := parseConfigFlags(args, stderr)
	if !ok {
		return code
	}
	setGCPercent()
	if err := runDaemon(cfg, flags.Load); err != nil {
		fmt.Fprintf(stderr, "minicri: %v\n", err)
		return 1
	}
	return 0
}

// runVersionCommand prints minicri's version and what the configured
// runtime handlers are: an operator on a node whose only runc is old reads
// here which fixes it lacks, as the daemon's Status and log say.
func runVersionCommand(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintf(stdout, "minicri %s (CRI %s)\n", version, "v1")
	cfg, code, ok := parseConfig(args, stderr)
	if !ok {
		return code
	}
	for _, line := range server.RuntimeReport(cfg) {
		fmt.Fprintln(stdout, line)
	}
	return 0
}
