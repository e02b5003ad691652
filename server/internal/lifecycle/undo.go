package lifecycle

import (
	"context"

	"github.com/sirupsen/logrus"
)

// UndoOnFailure is deferred by a lifecycle call right after it recorded a
// new object: when the call fails (*retErr set), undo removes what was made
// so far, with a context that outlives the caller's cancellation. What undo
// cannot remove is logged and left to start-up repair, which finds it from
// the record.
func UndoOnFailure(ctx context.Context, log *logrus.Entry, retErr *error, kind, id string, undo func(context.Context) error) {
	if *retErr == nil {
		return
	}
	if err := undo(context.WithoutCancel(ctx)); err != nil {
		log.WithField(kind, id).WithError(err).Warn("cleanup of a failed " + kind + " left something; start-up repair will retry")
	}
}
