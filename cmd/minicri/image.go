package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/sirupsen/logrus"

	"github.com/minicri/minicri/config"
	"github.com/minicri/minicri/image"
)

const imageUsage = `Usage:
  minicri image import [flags] FILE         add the images of an OCI layout tar or a
                                            docker save tar to the store
  minicri image export [flags] REF... FILE  write images to an archive that import,
                                            docker load and ctr import read
  minicri image list [flags]                list the images of the store

The store is the one under --root (or root in --config), the daemon's own: these
commands are safe while the daemon serves from it, and the daemon sees an
imported image at its next call. They take the daemon's flags.
`

// imageCommand is one `minicri image` subcommand: how many positional
// arguments it takes (max < 0: no limit) and what it does with the store.
type imageCommand struct {
	min, max int
	// readOnly commands refuse a root with no store instead of making one.
	readOnly bool
	// check (may be nil) looks at the arguments before the store is opened.
	check func(args []string) error
	run   func(ctx context.Context, st *image.Store, args []string, stdout io.Writer) error
}

var imageCommands = map[string]imageCommand{
	"import": {min: 1, max: 1, check: checkArchive, run: importImages},
	"export": {min: 2, max: -1, readOnly: true, run: exportImages},
	"list":   {min: 0, max: 0, readOnly: true, run: listImages},
}

// runImageCommand runs `minicri image SUBCOMMAND [flags] ARGS...`.
func runImageCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, imageUsage)
		return 2
	}
	if args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stdout, imageUsage)
		return 0
	}
	name, args := args[0], args[1:]
	cmd, ok := imageCommands[name]
	if !ok {
		fmt.Fprintf(stderr, "minicri image: unknown command %q\n\n%s", name, imageUsage)
		return 2
	}
	cfg, positional, code, ok := parseImageArgs(args, stderr)
	if !ok {
		return code
	}
	if len(positional) < cmd.min || cmd.max >= 0 && len(positional) > cmd.max {
		fmt.Fprintf(stderr, "minicri image %s: wrong number of arguments\n\n%s", name, imageUsage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := runOnStore(ctx, cfg, cmd, positional, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "minicri image %s: %v\n", name, err)
		return 1
	}
	return 0
}

func runOnStore(ctx context.Context, cfg config.Config, cmd imageCommand, args []string, stdout, stderr io.Writer) error {
	if cmd.check != nil {
		if err := cmd.check(args); err != nil {
			return err
		}
	}
	st, err := openImageStore(cfg, cmd.readOnly, stderr)
	if err != nil {
		return err
	}
	return cmd.run(ctx, st, args, stdout)
}

// parseImageArgs parses the daemon's flags anywhere on the command line
// (`import --root R FILE` and `import FILE --root R` alike) and loads the
// configuration they point at. ok=false means exit with code.
func parseImageArgs(args []string, stderr io.Writer) (cfg config.Config, positional []string, code int, ok bool) {
	fs, flags := newFlagSet(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), imageUsage) }
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return cfg, nil, 0, false
			}
			return cfg, nil, 2, false
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		// After "--" everything is an argument, even what looks like a flag.
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	cfg, err := flags.Load()
	if err != nil {
		fmt.Fprintf(stderr, "minicri: %v\n", err)
		return cfg, nil, 1, false
	}
	return cfg, positional, 0, true
}

// imageStoreDir is where the daemon keeps its image store (see
// server.openImages): the two must agree for the daemon to see imports.
func imageStoreDir(cfg config.Config) string { return filepath.Join(cfg.Root, "image") }

// openImageStore opens the daemon's image store. Registries do not matter
// here: nothing is pulled.
func openImageStore(cfg config.Config, readOnly bool, stderr io.Writer) (*image.Store, error) {
	dir := imageStoreDir(cfg)
	if readOnly {
		if _, err := os.Stat(dir); err != nil {
			return nil, fmt.Errorf("no image store at %s (is --root right?): %w", dir, err)
		}
	} else {
		if os.Geteuid() != 0 {
			return nil, errors.New("must run as root: layers are unpacked with the owners they name")
		}
		// The same mode as the daemon gives the state root; no chmod of an
		// existing one: the daemon's start repairs it.
		if err := os.MkdirAll(cfg.Root, 0o700); err != nil {
			return nil, fmt.Errorf("create %s: %w", cfg.Root, err)
		}
	}
	// An import unpacks under the daemon's bounds: an archive is as hostile as a registry.
	limits := image.Limits{
		MaxUnpackedBytes:   cfg.Image.MaxUnpackedBytes,
		MaxUnpackedEntries: cfg.Image.MaxUnpackedEntries,
		MaxPathDepth:       cfg.Image.MaxPathDepth,
	}
	st, err := image.New(image.Options{Root: dir, Limits: limits, Log: cliLogger(cfg, stderr)})
	if err != nil {
		return nil, err
	}
	return st, nil
}

// cliLogger logs the store's warnings (repairs, a failed clean-up) to
// stderr; its info lines are for the daemon's log, not a terminal, unless
// asked for with --log-level debug.
func cliLogger(cfg config.Config, stderr io.Writer) *logrus.Logger {
	l := logrus.New()
	l.SetOutput(stderr)
	l.SetLevel(logrus.WarnLevel)
	if level, err := logrus.ParseLevel(cfg.LogLevel); err == nil && level > logrus.InfoLevel {
		l.SetLevel(level)
	}
	return l
}

// checkArchive fails early on a file that cannot be an archive, before a
// store is made under a root that had none.
func checkArchive(args []string) error {
	fi, err := os.Stat(args[0])
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", args[0])
	}
	return nil
}

func importImages(ctx context.Context, st *image.Store, args []string, stdout io.Writer) error {
	images, err := st.Import(ctx, args[0])
	// Images of a multi-image archive that came in before a failure stay:
	// say which.
	if len(images) > 0 {
		printImages(stdout, images)
	}
	return err
}

func exportImages(ctx context.Context, st *image.Store, args []string, stdout io.Writer) error {
	refs, file := args[:len(args)-1], args[len(args)-1]
	images := make([]image.Image, 0, len(refs))
	for _, ref := range refs {
		img, err := st.Get(ref)
		if err != nil {
			return err
		}
		images = append(images, img)
	}
	if err := st.Export(ctx, refs, file); err != nil {
		return err
	}
	printImages(stdout, dedupe(images))
	return nil
}

func listImages(_ context.Context, st *image.Store, _ []string, stdout io.Writer) error {
	printImages(stdout, st.List())
	return nil
}

// dedupe drops repeats of one image (two tags of it named on the command line).
func dedupe(images []image.Image) []image.Image {
	seen := map[string]bool{}
	out := images[:0]
	for _, img := range images {
		if !seen[img.ID] {
			seen[img.ID] = true
			out = append(out, img)
		}
	}
	return out
}

// printImages writes one line per image: the full ID (what the CRI and
// crictl inspecti show), the size as crictl counts it, and the tags.
func printImages(w io.Writer, images []image.Image) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "IMAGE ID\tSIZE\tTAGS")
	for _, img := range images {
		tags := "<none>"
		if len(img.RepoTags) > 0 {
			tags = strings.Join(img.RepoTags, ",")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", img.ID, humanSize(img.Size), tags)
	}
	tw.Flush()
}

func humanSize(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	size, suffix := float64(n)/unit, "KiB"
	for _, next := range []string{"MiB", "GiB", "TiB"} {
		if size < unit {
			break
		}
		size, suffix = size/unit, next
	}
	return fmt.Sprintf("%.1f %s", size, suffix)
}
