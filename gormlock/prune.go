package gormlock

import (
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/ledger"
)

// Prune deletes the ledger rows of finished runs ('done' or 'failed') whose
// slot is more than olderThan before now by the database server's clock
// (read first; catch-up judges its window by it too), and returns how many
// it deleted (so far, when it stops at an error or when db's context ends).
// It never deletes a 'running' claim, works in short batches, and prunes
// only the namespace in effect. olderThan must exceed the longest period of
// the jobs plus the latest a trigger may come, or a pruned slot runs again.
// db must not be inside a transaction. An olderThan shorter than the
// catch-up window of [ormlock.WithCatchUp], given with it, plus 1 minute is
// refused. See docs/PROTOCOL.md (The ledger) and docs/SCHEDULES.md (Clocks
// of catch-up and Prune).
func Prune(db *gorm.DB, olderThan time.Duration, opts ...ormlock.Option) (int64, error) {
	const verb = "gormlock.Prune"
	argErr := ledger.CheckPrune(verb, olderThan)
	if argErr == nil && db != nil && inTx(db) {
		argErr = fmt.Errorf("%w: %s: db is inside a transaction; pruning commits batch by batch", ormlock.ErrInvalidArgument, verb)
	}
	d, cfg, err := open(db, verb, opts, argErr)
	if err == nil {
		err = ledger.CheckCatchUp(verb, olderThan, cfg)
	}
	if err != nil {
		return 0, err
	}
	t, err := ledger.NewTable(d, cfg.LedgerTable)
	if err == nil {
		err = checkPool(db, d)
	}
	if err != nil {
		return 0, err
	}
	sqlDB, err := primarySQL(db)
	if err != nil {
		return 0, err
	}
	return t.PruneOlderThan(ctxOf(db), sqlDB, cfg.Namespace, olderThan, ledger.PruneBatch)
}
