package ledger

import (
	"context"
	"fmt"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
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
//
// The lease table (ormlock.WithLease, config.Config.LeaseTableName) is
// created with it, under the same lock.
func createFence(ctx context.Context, q lockproto.Querier, op *lockproto.Op) error {
	if ft, err := lockproto.NewFenceTable(op.Dialect, op.Cfg.LedgerTable); err == nil {
		if err := ft.Create(ctx, q); err != nil {
			return err
		}
	}
	lt, err := lockproto.NewLeaseTable(op.Dialect, op.Cfg.LeaseTableName())
	if err != nil {
		return err
	}
	return lt.Create(ctx, q)
}

// MaxFenceAdvance bounds AdvanceFences' by, so that a counter moved many
// times stays far from the end of a bigint (2^63-1).
const MaxFenceAdvance = int64(1) << 52

// CheckAdvance checks AdvanceFences' by: positive and at most
// MaxFenceAdvance.
func CheckAdvance(verb string, by int64) error {
	if by <= 0 || by > MaxFenceAdvance {
		return fmt.Errorf("%w: %s: by must be in 1..%d, got %d", errs.ErrInvalidArgument, verb, MaxFenceAdvance, by)
	}
	return nil
}

// AdvanceFences adds by to every fencing counter of cfg's namespace in the
// fence table of cfg's ledger table, on q outside any transaction, and
// returns how many counters it moved: the body of every adapter's
// AdvanceFences, which a promotion of an asynchronous replica calls for
// (lockproto.FenceTable.Advance).
func AdvanceFences(ctx context.Context, q lockproto.Querier, d lockproto.Dialect, verb string, by int64, cfg config.Config) (int64, error) {
	if err := CheckAdvance(verb, by); err != nil {
		return 0, err
	}
	ft, err := lockproto.NewFenceTable(d, cfg.LedgerTable)
	if err != nil {
		return 0, err
	}
	n, err := ft.Advance(ctx, q, cfg.Namespace, by)
	if err != nil {
		return n, err
	}
	// the namespace's lease epochs: its high-water mark, which new epochs
	// start above (not counted: the count is of fencing counters)
	lt, err := lockproto.NewLeaseTable(d, cfg.LeaseTableName())
	if err != nil {
		return n, err
	}
	_, err = lt.Advance(ctx, q, cfg.Namespace, by)
	return n, err
}
