package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/internal/atomicfile"
	"github.com/minicri/minicri/internal/defaults"
	"github.com/minicri/minicri/internal/kernelfeat"
)

// The layout of the store's root directory.
const (
	metaLockName    = "lock"         // flock: images.json, generation, snapshot records
	contentLockName = "content.lock" // flock: shared by pulls, imports, exports; exclusive by GC
	gcPendingName   = "gc-pending"   // a removal asked for a GC that could not run yet
	generationName  = "generation"   // bumped after every images.json change
	imagesName      = "images.json"  // every image record
	blobsDir        = "blobs/sha256" // blobs by digest, verified
	layersDir       = "layers"       // unpacked layers by chain ID
	linksDir        = "l"            // short symlinks to layers, for the legacy mount API
	emptyParentName = "empty"        // 0700 like the store's other dirs
	emptyDirName    = "empty/root"   // the lower dir of an image without layers
	snapshotsDir    = "snapshots"    // container root filesystems
	tmpDir          = "tmp"          // everything half-made; swept by GC
)

// indexVersion is the format version of images.json.
const indexVersion = 1

const defaultMaxConcurrentDownloads = 3

// Store is an image store rooted at one directory. Its methods are safe for
// concurrent use, and several Stores (in one process or several) may share
// a root.
type Store struct {
	root string
	opts Options
	log  logrus.FieldLogger

	// transports are shared by all pulls so that connections are reused.
	secureTransport, insecureTransport http.RoundTripper
	hostTransports                     hostTransports // of hosts.toml hosts with TLS settings of their own

	live atomic.Pointer[Reloadable] // what Reconfigure may change while pulls run

	blobFlight  flights      // one download per blob digest
	layerFlight flights      // one unpack per chain ID
	unpackSlots *unpackSlots // bounds concurrent unpacks (CPU-bound), taken by pulls in turn
	mountMu     sync.Mutex   // serialises mount checks and mounts

	mu    sync.Mutex
	cat   *catalog // last catalog read or written; nil until the first read
	usage *usageCache
	// usageLoaded: the measure kept by the last daemon was read (fsinfo.go).
	usageLoaded bool
	// measureMu is held by the one walk of the store at a time.
	measureMu sync.Mutex
	// rootfsUsage: the measures of the containers' writable layers.
	rootfsUsage rootfsUsages
	// policies: the signature policies Admit parsed, and its admissions.
	policies policyCache
}

// catalog is an immutable snapshot of images.json.
type catalog struct {
	gen    uint64
	images []Image // sorted by ID
}

type indexFile struct {
	Version    int     `json:"version"`
	Generation uint64  `json:"generation"`
	Images     []Image `json:"images"`
}

// New opens the store at opts.Root, creating it if needed, and repairs what
// a crashed pull, import or removal left: temp files, unreferenced blobs and
// layers (unless another process is pulling into the same root right now;
// then the last pull to finish does it).
func New(opts Options) (*Store, error) {
	s, err := Open(opts)
	if err != nil {
		return nil, err
	}
	if err := s.CollectGarbage(); err != nil {
		return nil, err
	}
	return s, nil
}

// Open is New without the garbage collection, for a caller that runs
// CollectGarbage itself, later or beside other work: a daemon's restart
// need not wait for it (it reads every rootfs record and lists the
// content). Nothing is unsafe meanwhile: the collection takes the same
// locks as when another process (minicri image import) runs it while the
// daemon serves.
func Open(opts Options) (*Store, error) {
	if opts.Root == "" {
		return nil, errors.New("image store: root directory not set")
	}
	root, err := filepath.Abs(opts.Root)
	if err != nil {
		return nil, fmt.Errorf("image store root: %w", err)
	}
	defaults.Positive(&opts.MaxConcurrentDownloads, defaultMaxConcurrentDownloads)
	if opts.Log == nil {
		opts.Log = logrus.StandardLogger()
	}
	s := &Store{
		root:              root,
		opts:              opts,
		log:               opts.Log,
		secureTransport:   newTransport(false),
		insecureTransport: newTransport(true),
		unpackSlots:       newUnpackSlots(runtime.NumCPU()),
	}
	s.live.Store(&Reloadable{
		Registries: opts.Registries, RegistryConfigPath: opts.RegistryConfigPath, AuthFile: opts.AuthFile,
		PullTimeout: opts.PullTimeout, PullProgress: opts.PullProgress,
		SignaturePolicy: opts.SignaturePolicy, SignaturePolicyDir: opts.SignaturePolicyDir,
	})
	if err := s.makeDirs(); err != nil {
		return nil, err
	}
	// The idmapped-rootfs probe works on the layers' filesystem: in the
	// store's root, not tmp/, which a GC (of another process: minicri image
	// import) may sweep under it; it removes its two empty dirs after.
	kernelfeat.SetLayerDir(s.root)
	if err := s.removeSearchACLs(); err != nil {
		return nil, err
	}
	if err := s.repairGeneration(); err != nil {
		return nil, err
	}
	return s, nil
}

// CollectGarbage repairs what a crashed pull, import or removal left (temp
// files, half-made rootfses, unreferenced blobs and layers), unless another
// process holds the content lock; then the last one to release it does.
func (s *Store) CollectGarbage() error {
	if err := s.requestGC(); err != nil {
		return fmt.Errorf("image store repair: %w", err)
	}
	return nil
}

// repairGeneration rewrites the generation file when a writer died between
// writing images.json and the generation: other Stores would not notice the
// change otherwise.
func (s *Store) repairGeneration() error {
	c, unlock, err := s.lockedCatalog(unix.LOCK_EX)
	if err != nil {
		return err
	}
	defer unlock()
	gen, err := readCounter(s.path(generationName))
	if err != nil {
		return fmt.Errorf("image store: %w", err)
	}
	if gen < c.gen {
		if err := writeGeneration(s.path(generationName), c.gen); err != nil {
			return fmt.Errorf("image store: %w", err)
		}
	}
	s.setCatalog(c)
	return nil
}

func writeGeneration(path string, gen uint64) error {
	return atomicfile.Write(path, []byte(strconv.FormatUint(gen, 10)+"\n"), 0o600)
}

func (s *Store) makeDirs() error {
	if err := os.MkdirAll(s.root, 0o700); err != nil {
		return fmt.Errorf("image store: %w", err)
	}
	for _, dir := range []string{blobsDir, layersDir, linksDir, snapshotsDir, tmpDir} {
		if err := os.MkdirAll(s.path(dir), 0o700); err != nil {
			return fmt.Errorf("image store: %w", err)
		}
	}
	// Overlay needs at least one lower dir, even for an image with no
	// layers; its mode is the mode of such an image's root, so it sits in
	// a private dir of its own. Older versions made "empty" itself the
	// 0755 lower dir.
	if err := os.MkdirAll(s.path(emptyDirName), 0o755); err != nil {
		return fmt.Errorf("image store: %w", err)
	}
	if err := os.Chmod(s.path(emptyParentName), 0o700); err != nil {
		return fmt.Errorf("image store: %w", err)
	}
	return nil
}

// path joins elements below the root.
func (s *Store) path(elem ...string) string {
	return filepath.Join(append([]string{s.root}, elem...)...)
}

// Root returns the store's root directory (absolute).
func (s *Store) Root() string { return s.root }

// Get returns the image ref names: an ID ("sha256:<hex>" or "<hex>"), a
// unique ID prefix (3 hex digits or more), a tag ("busybox" is
// docker.io/library/busybox:latest) or a repo digest. ErrNotFound if none.
func (s *Store) Get(ref string) (Image, error) {
	c, err := s.current()
	if err != nil {
		return Image{}, err
	}
	img, err := resolve(c.images, ref)
	if err != nil {
		return Image{}, err
	}
	return img.clone(), nil
}

// List returns every image, sorted by ID. If the image list cannot be read
// it logs why and returns the last list it read.
func (s *Store) List() []Image {
	c, err := s.current()
	if err != nil {
		s.log.WithError(err).Warn("image store: cannot re-read the image list")
		s.mu.Lock()
		c = s.cat
		s.mu.Unlock()
	}
	if c == nil {
		return nil
	}
	out := make([]Image, len(c.images))
	for i := range c.images {
		out[i] = c.images[i].clone()
	}
	return out
}

// current returns the catalog, re-reading images.json only when another
// Store (or process) changed it since the last read.
func (s *Store) current() (*catalog, error) {
	gen, err := readCounter(s.path(generationName))
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	s.mu.Lock()
	c := s.cat
	s.mu.Unlock()
	if c != nil && c.gen >= gen {
		return c, nil
	}
	c, unlock, err := s.lockedCatalog(unix.LOCK_SH)
	if err != nil {
		return nil, err
	}
	defer unlock()
	s.setCatalog(c)
	return c, nil
}

func (s *Store) setCatalog(c *catalog) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cat == nil || c.gen >= s.cat.gen {
		s.cat = c
	}
}

// lockedCatalog takes the meta lock (unix.LOCK_SH to read, LOCK_EX to
// change the records) and reads the catalog under it; unlock releases it.
func (s *Store) lockedCatalog(how int) (c *catalog, unlock func(), err error) {
	lock, err := lockFile(s.path(metaLockName), how)
	if err != nil {
		return nil, nil, fmt.Errorf("image store lock: %w", err)
	}
	c, err = s.readCatalog()
	if err != nil {
		lock.Close()
		return nil, nil, err
	}
	return c, func() { lock.Close() }, nil
}

// readCatalog reads images.json; the caller holds the meta lock.
func (s *Store) readCatalog() (*catalog, error) {
	b, err := os.ReadFile(s.path(imagesName))
	if errors.Is(err, os.ErrNotExist) {
		return &catalog{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	var f indexFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("image store: %s: %w", imagesName, err)
	}
	if f.Version != indexVersion {
		return nil, fmt.Errorf("image store: %s has version %d, want %d", imagesName, f.Version, indexVersion)
	}
	sortImages(f.Images)
	return &catalog{gen: f.Generation, images: f.Images}, nil
}

// update changes the image records under the exclusive meta lock, from a
// fresh read of images.json, and writes them back atomically.
func (s *Store) update(edit func(images []Image) ([]Image, error)) (*catalog, error) {
	lock, err := lockFile(s.path(metaLockName), unix.LOCK_EX)
	if err != nil {
		return nil, fmt.Errorf("image store lock: %w", err)
	}
	defer lock.Close()
	return s.updateLocked(edit)
}

func (s *Store) updateLocked(edit func(images []Image) ([]Image, error)) (*catalog, error) {
	c, err := s.readCatalog()
	if err != nil {
		return nil, err
	}
	images := make([]Image, len(c.images))
	for i := range c.images {
		images[i] = c.images[i].clone()
	}
	images, err = edit(images)
	if err != nil {
		return nil, err
	}
	sortImages(images)
	next := &catalog{gen: c.gen + 1, images: images}
	b, err := json.Marshal(indexFile{Version: indexVersion, Generation: next.gen, Images: images})
	if err != nil {
		return nil, err
	}
	if err := atomicfile.Write(s.path(imagesName), b, 0o600); err != nil {
		return nil, fmt.Errorf("image store: write %s: %w", imagesName, err)
	}
	// The generation goes last: a reader that sees it finds images.json ready.
	if err := writeGeneration(s.path(generationName), next.gen); err != nil {
		return nil, fmt.Errorf("image store: write %s: %w", generationName, err)
	}
	s.setCatalog(next)
	s.invalidateUsage()
	return next, nil
}

func sortImages(images []Image) {
	sort.Slice(images, func(i, j int) bool { return images[i].ID < images[j].ID })
}

// Reloadable is what of Options may change while the store runs (on a
// SIGHUP): each pull reads it once at its start, so a running pull keeps
// what it started with.
type Reloadable struct {
	Registries         map[string]RegistryConfig
	RegistryConfigPath string
	AuthFile           string
	PullTimeout        time.Duration
	PullProgress       ProgressLimit
	// SignaturePolicy is a containers-policy.json that judges every pull
	// ("": none); SignaturePolicyDir's <namespace>.json replaces it for the
	// pods of that namespace. Both are read at every pull.
	SignaturePolicy, SignaturePolicyDir string
}

// Reconfigure puts r in force for the pulls that start from now on.
func (s *Store) Reconfigure(r Reloadable) { s.live.Store(&r) }
