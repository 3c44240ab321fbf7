package gormlock

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/ledger"
)

// Prune deletes the ledger rows of finished runs ('done' or 'failed') whose
// slot is more than olderThan before now, and returns how many it deleted.
// It never deletes a 'running' claim, and works in batches of at most 1,000
// rows, each a short transaction of its own, so the ledger is never locked
// for long; it stops at the first error or when db's context ends,
// returning what it deleted so far.
//
// olderThan must be longer than the longest period of the jobs plus the
// latest a trigger may come: a trigger for a slot whose row was pruned runs
// that slot again. A week is a safe choice for daily jobs.
//
// db must not be inside a transaction (the batches commit on their own). The
// ledger table is the one of [ormlock.WithLedgerTable] (or the plugin's).
// Only the rows of the namespace of [ormlock.WithNamespace] (or the
// plugin's; none by default) are pruned, the rows [Runs] reads: services
// that share a ledger table prune their own runs.
func Prune(db *gorm.DB, olderThan time.Duration, opts ...ormlock.Option) (int64, error) {
	const verb = "gormlock.Prune"
	if db == nil {
		return 0, fmt.Errorf("%w: %s: nil *gorm.DB", ormlock.ErrInvalidArgument, verb)
	}
	if db.Error != nil {
		return 0, db.Error
	}
	if err := ledger.ValidatePrune(verb, olderThan); err != nil {
		return 0, err
	}
	if inTx(db) {
		return 0, fmt.Errorf("%w: %s: db is inside a transaction; pruning commits batch by batch", ormlock.ErrInvalidArgument, verb)
	}
	d, err := dialectOf(db)
	if err != nil {
		return 0, err
	}
	cfg, err := configFor(db, opts)
	if err == nil {
		err = cfg.Err()
	}
	if err != nil {
		return 0, err
	}
	t, err := ledger.NewTable(d, cfg.LedgerTable)
	if err != nil {
		return 0, err
	}
	sqlDB, err := primarySQL(db)
	if err != nil {
		return 0, err
	}
	ctx := context.Background()
	if db.Statement != nil && db.Statement.Context != nil {
		ctx = db.Statement.Context
	}
	return t.Prune(ctx, sqlDB, cfg.Namespace, time.Now().Add(-olderThan), ledger.PruneBatch)
}
