package ledger

import (
	"context"

	"github.com/ormlock/ormlock/internal/lockproto"
)

// The fence table (fencing tokens, ormlock.WithFencing) goes with the ledger
// table: its name is the ledger's with lockproto.FenceTableSuffix, and
// Migrate creates both under the same lock, whether or not any verb uses
// fencing (an empty table costs nothing, and a call with WithFencing then
// never finds it missing). RunOnce's tokens count per job: see
// lockproto.JobFenceID.

// createFence creates the fence table of op's ledger table on q. A ledger
// table whose name is too long for the suffix (over 57 bytes) gets no fence
// table: Migrate succeeds as before, and a call WithFencing is refused with
// errs.ErrInvalidArgument before it takes the lock.
func createFence(ctx context.Context, q lockproto.Querier, op *lockproto.Op) error {
	ft, err := lockproto.NewFenceTable(op.Dialect, op.Cfg.LedgerTable)
	if err != nil {
		return nil
	}
	return ft.Create(ctx, q)
}
