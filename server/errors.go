package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/minicri/minicri/conmon"
	"github.com/minicri/minicri/image"
	"github.com/minicri/minicri/internal/broadcast"
	"github.com/minicri/minicri/network"
	"github.com/minicri/minicri/oci"
	"github.com/minicri/minicri/server/validate"
	"github.com/minicri/minicri/store"
	"github.com/minicri/minicri/streaming"
)

var (
	// errWrongState marks an object whose state does not allow the call: a
	// pod that is not ready, a container that is not created.
	errWrongState = errors.New("wrong state for the call")
	// errHostPortTaken marks a hostPort that the node itself uses.
	errHostPortTaken = errors.New("host port taken")
	// errPull marks a failed pull: what has no code of its own is the
	// image's or the registry's failure, not minicri's (Unknown, not Internal).
	errPull = errors.New("pull failed")
)

// markedError says its own message and carries errs for toStatus: the code
// comes from the sentinels, without their text in what the client reads.
type markedError struct {
	msg  string
	errs []error
}

func (e *markedError) Error() string   { return e.msg }
func (e *markedError) Unwrap() []error { return e.errs }

// markf is the message format says, with mark's code.
func markf(mark error, format string, args ...any) error {
	return &markedError{msg: fmt.Sprintf(format, args...), errs: []error{mark}}
}

// codeMappings lists, in order, which wrapped errors become which gRPC code;
// toStatus answers with the first that matches. The packages below server/
// return plain wrapped errors and sentinels; this is the one place where they
// meet gRPC codes. minicri's own sentinels come before the system's errors, so
// that one of them wrapping, say, a missing file keeps its own code.
var codeMappings = []struct {
	code    codes.Code
	targets []error
}{
	// A registry that is down, first: the kubelet backs off and retries a
	// pull, and one that failed at one mirror for want of the image and at
	// another for want of the registry may yet succeed.
	{codes.Unavailable, []error{image.ErrUnavailable}},
	{codes.InvalidArgument, []error{validate.ErrInvalid, store.ErrAmbiguousID,
		image.ErrInvalidReference, image.ErrAmbiguous, image.ErrArtifact,
		oci.ErrInvalid, oci.ErrNoCommand, oci.ErrUnknownHandler, conmon.ErrPauseIDUnmapped}},
	{codes.AlreadyExists, []error{store.ErrNameReserved}},
	{codes.NotFound, []error{store.ErrNotFound, image.ErrNotFound, oci.ErrNotFound}},
	{codes.FailedPrecondition, []error{image.ErrInUse, image.ErrSignatureRefused, image.ErrIDTaken, network.ErrNotReady,
		conmon.ErrNotRunning, conmon.ErrNoPauseBinary, errNotRunning, errHandlerUnavailable,
		errWrongState, errHostPortTaken, errKernelNoUserNamespaces, oci.ErrNoCheckpoint}},
	{codes.Unauthenticated, []error{image.ErrUnauthorized}},
	{codes.ResourceExhausted, []error{image.ErrTooLarge, streaming.ErrTooManyRequests, broadcast.ErrSlow, oci.ErrCheckpointTooLarge}},
	{codes.Unavailable, []error{broadcast.ErrClosed}},
	// A full or read-only state dir is the node's condition, not a bug:
	// answered so that the caller backs off instead of reporting Internal.
	{codes.ResourceExhausted, []error{syscall.ENOSPC}},
	{codes.FailedPrecondition, []error{syscall.EROFS}},
	{codes.DeadlineExceeded, []error{context.DeadlineExceeded}},
	{codes.Canceled, []error{context.Canceled}},
	{codes.NotFound, []error{os.ErrNotExist}},
	// Last: only what nothing above claims.
	{codes.Unknown, []error{errPull}},
}

// toStatus turns an error into a gRPC status error. Errors that already carry
// a status keep it; unknown errors are Internal.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	for _, m := range codeMappings {
		for _, target := range m.targets {
			if errors.Is(err, target) {
				return status.Error(m.code, err.Error())
			}
		}
	}
	return status.Error(codes.Internal, err.Error())
}
