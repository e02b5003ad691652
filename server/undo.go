package server

import (
	"context"

	"github.com/minicri/minicri/server/internal/lifecycle"
)

// undoOnFailure is lifecycle.UndoOnFailure with the server's log.
func (s *Server) undoOnFailure(ctx context.Context, retErr *error, kind, id string, undo func(context.Context) error) {
	lifecycle.UndoOnFailure(ctx, s.log, retErr, kind, id, undo)
}
