package oci

import "errors"

var (
	// ErrNotFound reports that the runtime does not know the container, or that
	// its cgroup is gone.
	ErrNotFound = errors.New("not found")

	// ErrInvalid reports a configuration that cannot become a valid spec: a bad
	// capability name, a relative mount path, a malformed user. The server
	// answers InvalidArgument.
	ErrInvalid = errors.New("invalid container configuration")

	// ErrNoCommand reports that neither the container nor its image gives a
	// command to run.
	ErrNoCommand = errors.New("no command specified")

	// ErrUnknownHandler reports a RuntimeClass handler with no configured runtime.
	ErrUnknownHandler = errors.New("unknown runtime handler")
)
