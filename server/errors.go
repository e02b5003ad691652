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
	"github.com/minicri/minicri/store"
	"github.com/minicri/minicri/streaming"
)

// errInvalid marks a malformed request; invalidf names the field.
var errInvalid = errors.New("invalid argument")

func invalidf(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", errInvalid, field, fmt.Sprintf(format, args...))
}

// codeMappings lists, in order, which wrapped error becomes which gRPC code.
// The packages below server/ return plain wrapped errors and sentinels; this
// is the one place where they meet gRPC codes.
var codeMappings = []struct {
	target error
	code   codes.Code
}{
	{errInvalid, codes.InvalidArgument},
	{store.ErrAmbiguousID, codes.InvalidArgument},
	{store.ErrNameReserved, codes.AlreadyExists},
	{store.ErrNotFound, codes.NotFound},
	{image.ErrNotFound, codes.NotFound},
	{image.ErrInvalidReference, codes.InvalidArgument},
	{image.ErrAmbiguous, codes.InvalidArgument},
	{image.ErrInUse, codes.FailedPrecondition},
	{image.ErrUnauthorized, codes.Unauthenticated},
	{image.ErrTooLarge, codes.ResourceExhausted},
	{oci.ErrInvalid, codes.InvalidArgument},
	{oci.ErrNoCommand, codes.InvalidArgument},
	{oci.ErrUnknownHandler, codes.InvalidArgument},
	{oci.ErrNotFound, codes.NotFound},
	{network.ErrNotReady, codes.FailedPrecondition},
	{conmon.ErrNotRunning, codes.FailedPrecondition},
	{errNotRunning, codes.FailedPrecondition},
	{errHandlerUnavailable, codes.FailedPrecondition},
	{streaming.ErrTooManyRequests, codes.ResourceExhausted},
	{broadcast.ErrSlow, codes.ResourceExhausted},
	{broadcast.ErrClosed, codes.Unavailable},
	// A full or read-only state dir is the node's condition, not a bug:
	// answered so that the caller backs off instead of reporting Internal.
	{syscall.ENOSPC, codes.ResourceExhausted},
	{syscall.EROFS, codes.FailedPrecondition},
	{context.DeadlineExceeded, codes.DeadlineExceeded},
	{context.Canceled, codes.Canceled},
	{os.ErrNotExist, codes.NotFound},
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
		if errors.Is(err, m.target) {
			return status.Error(m.code, err.Error())
		}
	}
	return status.Error(codes.Internal, err.Error())
}
