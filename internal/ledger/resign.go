package ledger

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/status"
)

// Resign asks the leader of a.Key to step down (ormlock.ActionResign) in
// namespace ns of t's controls table on db, holder telling who leads now,
// and logs the action. Not carried out yet: an error wrapping
// errs.ErrInvalidArgument.
func Resign(ctx context.Context, db *sql.DB, t *Table, verb, ns string, a status.Action, holder func(ctx context.Context) (lockproto.HolderInfo, error)) (status.ActionRecord, error) {
	return status.ActionRecord{}, fmt.Errorf("%w: %s: resign is not supported yet", errs.ErrInvalidArgument, verb)
}
