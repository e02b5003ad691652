package server

import (
	"fmt"
	"strings"

	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/server/validate"
	"github.com/minicri/minicri/store"
)

// Finding a request's sandbox or container: an ID or a unique prefix of
// one, checked before it is compared with the records' IDs.

// resolveSandbox finds the full ID of the sandbox a request names by ID or
// unique prefix.
func (s *Server) resolveSandbox(field, id string) (string, error) {
	if err := requireID(field, id); err != nil {
		return "", err
	}
	return s.sandboxes.Resolve(id)
}

// resolveContainer finds the full ID of the container a request names by ID
// or unique prefix.
func (s *Server) resolveContainer(field, id string) (string, error) {
	if err := requireID(field, id); err != nil {
		return "", err
	}
	return s.containers.Resolve(id)
}

// lookupContainer is resolveContainer and the record it names.
func (s *Server) lookupContainer(id string) (lifecycle.ContainerRecord, error) {
	full, err := s.resolveContainer("container_id", id)
	if err != nil {
		return lifecycle.ContainerRecord{}, err
	}
	return s.containers.Get(full)
}

// lookupSandbox is resolveSandbox and the record it names.
func (s *Server) lookupSandbox(id string) (lifecycle.SandboxRecord, error) {
	full, err := s.resolveSandbox("pod_sandbox_id", id)
	if err != nil {
		return lifecycle.SandboxRecord{}, err
	}
	return s.sandboxes.Get(full)
}

// requireID checks an object ID from a request before it is looked up. Only
// an empty ID is malformed: any other string that names no record is
// NotFound, whatever its characters, as containerd answers (its ID index
// finds nothing for it), so that Stop and Remove of it succeed as the CRI
// asks and a status call answers NotFound. Clients other than the kubelet
// send UUIDs or names. Such a string never reaches a file name: it is only
// compared with the IDs in memory, and only the full ID of a record found
// there is used in a path.
func requireID(field, id string) error {
	if id == "" {
		return validate.Invalidf(field, "must not be empty")
	}
	if !isID(id) {
		return fmt.Errorf("%s %.80q: %w", field, id, store.ErrNotFound)
	}
	return nil
}

// isID reports whether s can be (a prefix of) an ID minicri made: 64
// hexadecimal digits at most. Only such strings are used in file names.
func isID(s string) bool {
	return s != "" && len(s) <= 64 && strings.Trim(s, "0123456789abcdefABCDEF") == ""
}
