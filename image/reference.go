package image

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// dockerHub is the registry name references show for Docker Hub; the
// registry library calls it index.docker.io.
const dockerHub = "docker.io"

// reference is a normalised image reference: "busybox" is
// docker.io/library/busybox:latest, as crictl and the kubelet show it.
type reference struct {
	host   string // "docker.io", "127.0.0.1:5000"
	path   string // "library/busybox"
	tag    string // "latest"; "" when digest is set
	digest string // "sha256:…"; "" for a tag reference
}

// The image reference grammar of the distribution spec, which the kubelet
// and every registry follow: a host of letters, digits, dots and dashes
// (and a port), path components of lower-case letters and digits joined by
// single separators, a tag, a digest. Nothing in it can walk up a path.
var (
	idPattern        = regexp.MustCompile(`^(sha256:)?[a-f0-9]{1,64}$`)
	hostPattern      = regexp.MustCompile(`^(\[[0-9a-fA-F:]+\]|[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?)*)(:[0-9]+)?$`)
	componentPattern = regexp.MustCompile(`^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*$`)
	tagPattern       = regexp.MustCompile(`^[\w][\w.-]{0,127}$`)
	digestPattern    = regexp.MustCompile(`^[a-z0-9]+([+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]{32,}$`)
)

// ValidateReference accepts what the image calls accept: an image ID or a
// prefix of one, or a reference that PullImage can pull. The server checks
// requests with it, so that validation and pull cannot disagree.
func ValidateReference(ref string) error {
	if idPattern.MatchString(ref) {
		return nil
	}
	_, err := parseReference(ref)
	return err
}

// checkGrammar holds ref to the distribution grammar, which is stricter than
// the registry library's parser (that one lets "a//b" and "../x" through).
func checkGrammar(ref string) error {
	name, digest, hasDigest := strings.Cut(ref, "@")
	if hasDigest && !digestPattern.MatchString(digest) {
		return fmt.Errorf("%w: %q has a malformed digest", ErrInvalidReference, ref)
	}
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		if !tagPattern.MatchString(name[i+1:]) {
			return fmt.Errorf("%w: %q has a malformed tag", ErrInvalidReference, ref)
		}
		name = name[:i]
	}
	host, path, hasHost := splitHost(name)
	if hasHost && !hostPattern.MatchString(host) {
		return fmt.Errorf("%w: %q has a malformed registry host", ErrInvalidReference, ref)
	}
	for _, part := range strings.Split(path, "/") {
		if !componentPattern.MatchString(part) {
			return fmt.Errorf("%w: %q: path component %q", ErrInvalidReference, ref, part)
		}
	}
	return nil
}

// splitHost splits a repository name ("host/path", "path") into its
// registry host, if it names one, and its path, by the distribution rule:
// the first component is a host when it has a dot, a port or an upper-case
// letter, or is localhost.
func splitHost(name string) (host, path string, ok bool) {
	first, rest, found := strings.Cut(name, "/")
	if found && (strings.ContainsAny(first, ".:") || first == "localhost" || strings.ToLower(first) != first) {
		return first, rest, true
	}
	return "", name, false
}

// canonicalRef is ref (grammar-checked) with its registry host spelled as
// canonicalHost spells it.
func canonicalRef(ref string) (string, error) {
	host, rest, ok := splitHost(ref)
	if !ok {
		return ref, nil
	}
	h, err := canonicalHost(host)
	if err != nil {
		return "", fmt.Errorf("%w: %q: %v", ErrInvalidReference, ref, err)
	}
	return h + "/" + rest, nil
}

// httpsPort is the port a registry is reached on when a reference names
// none: HTTPS's. containerd's resolver takes "" and 443 alike.
const httpsPort = "443"

// canonicalHost is the one spelling of a registry host ("host[:port]") that
// everything keyed by hosts sees: policy scopes, [image.registries],
// hosts.toml, the auth file, the store's names. Another spelling of the
// same registry must not find another entry (or none, and so the default):
// the host in lower case (DNS names and IPv6 hex ignore case), an IPv6
// address in its shortest form (an IPv4-mapped one as the IPv4 address it
// dials), the port in decimal without leading zeros,
// and no ":443" (the port a reference without one reaches). A host with a
// spelling that cannot be made one is refused: a numeric host other than a
// dotted-quad IPv4 address ("127.1", "0x7f.0.0.1", "2130706433",
// "127.000.000.001"), which resolvers read in ways of their own; a port
// out of 1-65535; a one-label name other than localhost that, lower-cased,
// would read as a Docker Hub namespace.
func canonicalHost(host string) (string, error) {
	name, port, hasPort := host, "", false
	if strings.HasPrefix(host, "[") {
		end := strings.IndexByte(host, ']')
		if end < 0 || (end+1 < len(host) && host[end+1] != ':') {
			return "", fmt.Errorf("registry host %q: malformed IPv6 address", host)
		}
		name = host[:end+1]
		if end+1 < len(host) {
			port, hasPort = host[end+2:], true
		}
	} else if i := strings.LastIndexByte(host, ':'); i >= 0 {
		name, port, hasPort = host[:i], host[i+1:], true
	}
	if hasPort {
		trimmed := strings.TrimLeft(port, "0")
		n, err := strconv.Atoi(trimmed)
		if err != nil || len(trimmed) > 5 || n < 1 || n > 65535 {
			return "", fmt.Errorf("registry host %q: port %q is not one of 1-65535", host, port)
		}
		port = strconv.Itoa(n)
	}
	switch {
	case strings.HasPrefix(name, "["):
		a, err := netip.ParseAddr(name[1 : len(name)-1])
		if err != nil || !a.Is6() || a.Zone() != "" {
			return "", fmt.Errorf("registry host %q: not an IPv6 address", host)
		}
		if a.Is4In6() {
			// [::ffff:7f00:1] dials 127.0.0.1: one address, one spelling.
			name = a.Unmap().String()
		} else {
			name = "[" + a.String() + "]"
		}
	default:
		name = strings.ToLower(name)
		labels := strings.Split(name, ".")
		if last := labels[len(labels)-1]; last != "" && last[0] >= '0' && last[0] <= '9' {
			// No top-level domain starts with a digit: this is an address.
			if a, err := netip.ParseAddr(name); err != nil || !a.Is4() || a.String() != name {
				return "", fmt.Errorf("registry host %q: a numeric host must be an IPv4 address written a.b.c.d, in decimal without leading zeros", host)
			}
		} else if len(labels) == 1 && name != "localhost" && port == "" {
			return "", fmt.Errorf("registry host %q: in lower case it would name a Docker Hub namespace; write the host with a dot or a port", host)
		}
	}
	if port == httpsPort && (strings.ContainsAny(name, ".[") || name == "localhost") {
		port = ""
	}
	if port != "" {
		return name + ":" + port, nil
	}
	return name, nil
}

// parseReference normalises ref. A reference with both a tag and a digest
// ("busybox:1.36@sha256:…") is a digest reference: the digest decides.
func parseReference(ref string) (reference, error) {
	if ref == "" || strings.TrimSpace(ref) != ref {
		return reference{}, fmt.Errorf("%w: %q", ErrInvalidReference, ref)
	}
	if err := checkGrammar(ref); err != nil {
		return reference{}, err
	}
	ref, err := canonicalRef(ref)
	if err != nil {
		return reference{}, err
	}
	r, err := name.ParseReference(ref, name.WeakValidation)
	if err != nil {
		return reference{}, fmt.Errorf("%w: %q: %v", ErrInvalidReference, ref, err)
	}
	out := reference{host: displayHost(r.Context().RegistryStr()), path: r.Context().RepositoryStr()}
	switch r := r.(type) {
	case name.Digest:
		out.digest = r.DigestStr()
		if !strings.HasPrefix(out.digest, "sha256:") {
			return reference{}, fmt.Errorf("%w: %q: only sha256 digests are supported", ErrInvalidReference, ref)
		}
	case name.Tag:
		out.tag = r.TagStr()
	}
	return out, nil
}

func displayHost(registry string) string {
	if registry == name.DefaultRegistry {
		return dockerHub
	}
	return registry
}

// repo is "docker.io/library/busybox".
func (r reference) repo() string { return r.host + "/" + r.path }

// String is "docker.io/library/busybox:latest" or "…/busybox@sha256:…".
func (r reference) String() string {
	if r.digest != "" {
		return r.repo() + "@" + r.digest
	}
	return r.repo() + ":" + r.tag
}

// withDigest is the repo digest of this reference's repository.
func (r reference) withDigest(digest string) string { return r.repo() + "@" + digest }

// isHex reports whether s is non-empty lowercase hex.
func isHex(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// minIDPrefix is the shortest ID prefix Get accepts, so that a short image
// name made of hex letters ("abc" is one) is not taken for an ID by accident.
const minIDPrefix = 3

// resolve finds the image ref names in images (sorted by ID): a full ID
// ("sha256:<hex>" or "<hex>"), a tag or repo digest (normalised), or a
// unique ID prefix.
func resolve(images []Image, ref string) (*Image, error) {
	hexPart := strings.TrimPrefix(ref, "sha256:")
	if len(hexPart) == 64 && isHex(hexPart) {
		for i := range images {
			if images[i].ID == "sha256:"+hexPart {
				return &images[i], nil
			}
		}
		return nil, fmt.Errorf("image %s: %w", ref, ErrNotFound)
	}
	if named, err := parseReference(ref); err == nil {
		if img := findNamed(images, named); img != nil {
			return img, nil
		}
	}
	if len(hexPart) >= minIDPrefix && isHex(hexPart) {
		return findPrefix(images, "sha256:"+hexPart)
	}
	return nil, fmt.Errorf("image %s: %w", ref, ErrNotFound)
}

func findNamed(images []Image, named reference) *Image {
	want := named.String()
	for i := range images {
		list := images[i].RepoTags
		if named.digest != "" {
			list = images[i].RepoDigests
		}
		for _, n := range list {
			if n == want {
				return &images[i]
			}
		}
	}
	return nil
}

func findPrefix(images []Image, prefix string) (*Image, error) {
	var found *Image
	for i := range images {
		if strings.HasPrefix(images[i].ID, prefix) {
			if found != nil {
				return nil, fmt.Errorf("%w: %s", ErrAmbiguous, strings.TrimPrefix(prefix, "sha256:"))
			}
			found = &images[i]
		}
	}
	if found == nil {
		return nil, fmt.Errorf("image %s: %w", strings.TrimPrefix(prefix, "sha256:"), ErrNotFound)
	}
	return found, nil
}
