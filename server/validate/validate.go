// Package validate holds the field rules of CRI requests: pure functions,
// CRI types in, an error out that wraps ErrInvalid and names the first bad
// field. server/errors.go maps ErrInvalid to InvalidArgument, once. The
// rules that ask the host, its kernel or a runtime handler stay in server.
package validate

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"unicode"
)

// The field rules every request shares: names, printable strings, paths,
// lists, maps. The rules of each object are beside it (sandbox.go,
// container.go, mounts.go, image.go, security.go, userns.go); finding the
// records a request names is in server/records_lookup.go.

// ErrInvalid marks a malformed request; Invalidf names the field.
var ErrInvalid = errors.New("invalid argument")

// Invalidf is an ErrInvalid naming field, with the reason format says.
func Invalidf(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, field, fmt.Sprintf(format, args...))
}

// Limits on what a request may carry. They are generous for any real pod and
// stop a caller from making the daemon write huge records or paths.
const (
	maxNameLen     = 253 // a Kubernetes DNS subdomain
	MaxHostnameLen = 64  // the kernel's limit
	maxValueLen    = 4096
	maxListLen     = 1024
	// maxArgLen is the kernel's MAX_ARG_STRLEN: execve refuses a longer
	// argument or environment string.
	maxArgLen = 128 << 10
	// maxAnnotationsSize is the API server's limit on all of an object's
	// annotations together; the kubelet passes a pod's on unchanged.
	maxAnnotationsSize = 256 << 10
)

// validateName checks a metadata name, namespace or UID: the parts of the
// reserved name and of the kubelet's log directory.
func validateName(field, v string) error {
	if v == "" {
		return Invalidf(field, "must not be empty")
	}
	if len(v) > maxNameLen {
		return Invalidf(field, "is %d bytes, longer than %d", len(v), maxNameLen)
	}
	if strings.ContainsAny(v, "/\\") || v == "." || v == ".." {
		return Invalidf(field, "%q must not contain a path separator or be a dot name", v)
	}
	if err := Printable(field, v); err != nil {
		return err
	}
	return nil
}

// Printable refuses control characters, which would break log lines,
// generated files (/etc/hosts) and record names.
func Printable(field, v string) error {
	if len(v) > maxValueLen {
		return Invalidf(field, "is %d bytes, longer than %d", len(v), maxValueLen)
	}
	for _, r := range v {
		if unicode.IsControl(r) {
			return Invalidf(field, "must not contain control characters (found %q)", r)
		}
	}
	return nil
}

// validateHostPath checks an absolute path on the node named by a request.
func validateHostPath(field, p string) error {
	if !filepath.IsAbs(p) {
		return Invalidf(field, "%q must be an absolute path", p)
	}
	return validateCleanPath(field, p)
}

// validateCleanPath refuses ".." components: no request may reach outside
// the directory it names by walking up.
func validateCleanPath(field, p string) error {
	if err := Printable(field, p); err != nil {
		return err
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return Invalidf(field, "%q must not contain \"..\"", p)
		}
	}
	return nil
}

func validateStrings(field string, values []string) error {
	return validateList(field, values, Printable)
}

// validateList checks a list's length, then each entry with check.
func validateList(field string, values []string, check func(field, v string) error) error {
	if len(values) > maxListLen {
		return Invalidf(field, "has %d entries, more than %d", len(values), maxListLen)
	}
	for _, v := range values {
		if err := check(field, v); err != nil {
			return err
		}
	}
	return nil
}

// Named is a request field's name and value, for the checks that run over
// several alike fields.
type Named[T any] struct {
	Name string
	V    T
}

// validateEach runs check on each field in turn and answers the first error.
func validateEach[T any](check func(field string, v T) error, fields []Named[T]) error {
	for _, f := range fields {
		if err := check(f.Name, f.V); err != nil {
			return err
		}
	}
	return nil
}

func Map(field string, m map[string]string) error {
	if len(m) > maxListLen {
		return Invalidf(field, "has %d entries, more than %d", len(m), maxListLen)
	}
	for k, v := range m {
		if k == "" {
			return Invalidf(field, "has an empty key")
		}
		if err := Printable(field+"["+k+"]", k+v); err != nil {
			return err
		}
	}
	return nil
}

// validateAnnotations checks annotation keys like labels, but lets values be
// what the API server lets them be: any text up to 256 KiB in all, newlines
// included (kubectl's last-applied-configuration ends with one).
func validateAnnotations(field string, m map[string]string) error {
	size := 0
	for k, v := range m {
		if k == "" {
			return Invalidf(field, "has an empty key")
		}
		if err := Printable(field, k); err != nil {
			return err
		}
		if strings.IndexByte(v, 0) >= 0 {
			return Invalidf(field+"["+k+"]", "must not contain NUL")
		}
		size += len(k) + len(v)
	}
	if size > maxAnnotationsSize {
		return Invalidf(field, "are %d bytes in all, more than %d", size, maxAnnotationsSize)
	}
	return nil
}

// validateArgs checks a command line: each string goes to execve, which
// takes any bytes but NUL (a multi-line "sh -c" script is common) and none
// longer than maxArgLen.
func validateArgs(field string, args []string) error {
	return validateList(field, args, func(field, a string) error {
		if len(a) > maxArgLen {
			return Invalidf(field, "has an entry of %d bytes, longer than %d", len(a), maxArgLen)
		}
		if strings.IndexByte(a, 0) >= 0 {
			return Invalidf(field, "must not contain NUL")
		}
		return nil
	})
}

// validateContainerPaths checks paths inside the container: absolute, no "..".
func validateContainerPaths(field string, paths []string) error {
	return validateList(field, paths, validateHostPath)
}

// validateLabelsAndAnnotations checks the labels and annotations of a pod's
// or a container's config.
func validateLabelsAndAnnotations(labels, annotations map[string]string) error {
	if err := Map("config.labels", labels); err != nil {
		return err
	}
	return validateAnnotations("config.annotations", annotations)
}
