// Package image is minicri's image service below the CRI: it pulls images
// from registries (mirrors, auth, insecure hosts), keeps their blobs and
// unpacked layers in a content store under one root directory, imports and
// exports image archives, and makes overlayfs root filesystems for containers.
//
// Several processes may share a root (the daemon and `minicri image import`):
// every metadata change happens under a file lock and is written atomically,
// and each Store re-reads the image list when another process changed it.
// Nothing half-made is ever visible: blobs and layers are written to temp
// files and renamed into place once verified, and the image record comes last.
package image

import (
	"cmp"
	"errors"
	"time"

	"github.com/sirupsen/logrus"
)

var (
	// ErrNotFound: no image (or rootfs) answers to the reference or ID; from
	// Pull, the registry has no such image, or its host does not exist.
	ErrNotFound = errors.New("not found")
	// ErrInUse: the image cannot be removed while a container rootfs uses it.
	ErrInUse = errors.New("image is in use by a container")
	// ErrInvalidReference: the string is not an image reference.
	ErrInvalidReference = errors.New("invalid image reference")
	// ErrAmbiguous: an ID prefix matches more than one image.
	ErrAmbiguous = errors.New("ambiguous image ID prefix")
	// ErrUnauthorized: the registry refused the credentials (or their absence).
	ErrUnauthorized = errors.New("registry refused the credentials")
	// ErrIDTaken: what was pulled has the ID of a record of another kind
	// (an artifact's for an image, an image's for an artifact), which no
	// pull replaces.
	ErrIDTaken = errors.New("the ID names an image of another kind")
	// ErrUnavailable: the registry could not be reached or answered that it
	// cannot serve now (connection refused, timeout, 429, 502/503/504):
	// worth a retry later.
	ErrUnavailable = errors.New("registry unavailable")
)

// RegistryConfig is what the node knows about one registry host.
type RegistryConfig struct {
	// Mirrors are endpoints tried in order before the registry itself:
	// "http://127.0.0.1:5001", "https://mirror.internal:5000" or
	// "mirror.internal:5000" (HTTPS). They serve the same repository paths.
	Mirrors []string
	// Insecure allows plain HTTP and skips TLS verification for the host.
	Insecure bool
}

// Options configures a Store.
type Options struct {
	// Root is the store's directory (e.g. /var/lib/minicri/image); the store
	// owns everything below it.
	Root string
	// PrivateParents are directories above Root, top first, that are
	// private (0700) too: the daemon's state root. Opening the store takes
	// off what older versions added to them (acl.go).
	PrivateParents []string
	// Registries by host[:port] as written in references: "docker.io",
	// "127.0.0.1:5000". A mirror's own host may have an entry too (for Insecure).
	Registries map[string]RegistryConfig
	// RegistryConfigPath is a directory of <host[:port]>/hosts.toml files
	// in containerd's shape (hosts.go), read at every pull; "" for none.
	RegistryConfigPath string
	// AuthFile is a Docker config.json whose credentials serve a pull that
	// brings none, read at every pull; "" for none.
	AuthFile string
	// SignaturePolicy is a containers-policy.json judging every pull, and
	// SignaturePolicyDir a directory of <namespace>.json that replace it
	// for one namespace's pods (sigpolicy.go); "" for none. Read at every pull.
	SignaturePolicy, SignaturePolicyDir string
	// PullTimeout cancels a pull that takes longer; 0 means no limit.
	PullTimeout time.Duration
	// PullProgress cancels a pull whose layer download moves too little
	// (*StalledError); its zero value is off.
	PullProgress ProgressLimit
	// MaxConcurrentDownloads is how many layers one pull downloads at once (default 3).
	MaxConcurrentDownloads int
	// Limits bound what one pull or import unpacks; zero fields are the defaults.
	Limits Limits
	// Log receives pull progress (info) and repair notes (warnings); default logrus.StandardLogger().
	Log logrus.FieldLogger
	// Hooks are what a test may replace; the zero value is the daemon's.
	Hooks Hooks
}

// Hooks are the store's seams: a field left zero takes the real thing.
type Hooks struct {
	// Now is the clock the disk usage measures are aged by (default
	// time.Now): a test moves it past usageTTL instead of waiting.
	Now func() time.Time
	// WalkUpper measures a container's upper dir (default diskUsage): a
	// test makes one slow to walk.
	WalkUpper func(upper string) (bytes, inodes uint64, err error)
	// ProgressInterval is how often a pull logs the layers still
	// downloading (default 5 s).
	ProgressInterval time.Duration
	// SyncLayer makes the files of a layer's temp dir durable before the
	// dir is named (default syncFS): a test looks at the store meanwhile.
	SyncLayer func(dir string) error
}

func (h Hooks) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

func (h Hooks) walkUpper(upper string) (bytes, inodes uint64, err error) {
	if h.WalkUpper != nil {
		return h.WalkUpper(upper)
	}
	return diskUsage(upper)
}

func (h Hooks) syncLayer(dir string) error {
	if h.SyncLayer != nil {
		return h.SyncLayer(dir)
	}
	return syncFS(dir)
}

func (h Hooks) progressInterval() time.Duration {
	return cmp.Or(h.ProgressInterval, 5*time.Second)
}

// Auth holds the CRI AuthConfig fields for one pull.
type Auth struct {
	Username, Password string
	Auth               string // base64 "user:password"
	IdentityToken      string // an OAuth refresh token
	RegistryToken      string // a bearer token sent as is
}

// Config is what a container runtime needs from the image config.
type Config struct {
	User       string            `json:"user,omitempty"`
	WorkingDir string            `json:"workingDir,omitempty"`
	StopSignal string            `json:"stopSignal,omitempty"`
	Env        []string          `json:"env,omitempty"`
	Entrypoint []string          `json:"entrypoint,omitempty"`
	Cmd        []string          `json:"cmd,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	// Volumes are the container paths the image declares as volumes, sorted.
	Volumes []string `json:"volumes,omitempty"`
	// ExposedPorts are "PORT/PROTO" strings ("80/tcp"), sorted.
	ExposedPorts []string `json:"exposedPorts,omitempty"`
}

// Layer is one layer of an image, bottom first.
type Layer struct {
	Digest    string `json:"digest"` // of the blob as stored (compressed)
	Size      int64  `json:"size"`   // of the blob
	MediaType string `json:"mediaType"`
	DiffID    string `json:"diffID"`  // of the uncompressed tar
	ChainID   string `json:"chainID"` // names the unpacked layer, shared by every image that has it
	// File is the name of an artifact's layer in its volume (the layer is
	// that one file); "" for an image's layer.
	File string `json:"file,omitempty"`
}

// Image is one image in the store. It marshals to JSON as the verbose info
// of CRI ImageStatus.
type Image struct {
	ID          string   `json:"id"`          // "sha256:<hex>" of the config blob; an artifact's: artifactID
	RepoTags    []string `json:"repoTags"`    // "docker.io/library/busybox:latest"
	RepoDigests []string `json:"repoDigests"` // "docker.io/library/busybox@sha256:<manifest or index digest>"
	// Size is the compressed layers plus the config, as crictl shows it.
	Size   uint64 `json:"size"`
	Config Config `json:"config"`

	ManifestDigest string    `json:"manifestDigest"` // of the platform manifest that was unpacked
	MediaType      string    `json:"mediaType"`      // of that manifest
	ConfigSize     int64     `json:"configSize"`
	Platform       string    `json:"platform"` // "linux/amd64"
	Created        time.Time `json:"created"`  // from the config
	Layers         []Layer   `json:"layers"`
	// Signatures are the look-ups of the image's cosign signatures that
	// pulls and creates made (sigkeep.go), judged again at every create.
	Signatures []SignatureSet `json:"signatures,omitempty"`
	// ArtifactType is set for an OCI artifact (artifact.go): files for an
	// image volume, never a container's root.
	ArtifactType string `json:"artifactType,omitempty"`
}

// IsArtifact: the image is an OCI artifact, usable only as an image volume.
func (img Image) IsArtifact() bool { return img.ArtifactType != "" }

// ChainIDs returns the chain IDs of the image's layers, bottom first.
func (img Image) ChainIDs() []string {
	ids := make([]string, len(img.Layers))
	for i, l := range img.Layers {
		ids[i] = l.ChainID
	}
	return ids
}

func (img Image) clone() Image {
	c := img
	c.RepoTags = append([]string(nil), img.RepoTags...)
	c.RepoDigests = append([]string(nil), img.RepoDigests...)
	c.Layers = append([]Layer(nil), img.Layers...)
	c.Signatures = append([]SignatureSet(nil), img.Signatures...) // a set is never changed in place
	c.Config.Env = append([]string(nil), img.Config.Env...)
	c.Config.Entrypoint = append([]string(nil), img.Config.Entrypoint...)
	c.Config.Cmd = append([]string(nil), img.Config.Cmd...)
	c.Config.Volumes = append([]string(nil), img.Config.Volumes...)
	c.Config.ExposedPorts = append([]string(nil), img.Config.ExposedPorts...)
	if img.Config.Labels != nil {
		c.Config.Labels = make(map[string]string, len(img.Config.Labels))
		for k, v := range img.Config.Labels {
			c.Config.Labels[k] = v
		}
	}
	return c
}

// FsUsage is what ImageFsInfo reports: the filesystem holding the store and
// what the store (blobs, layers, container rootfs upper dirs) uses on it.
type FsUsage struct {
	Mountpoint string
	UsedBytes  uint64
	InodesUsed uint64
}
