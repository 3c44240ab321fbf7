package gormlock

import (
	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/ledger"
)

// Migrate creates the RunOnce ledger table, and the fence table of
// [ormlock.WithFencing], if they do not exist; calling it again is harmless,
// and replicas may all call it at start-up (it holds a lock on the table
// name meanwhile). The table is "ormlock_runs" or [ormlock.WithLedgerTable]'s
// (per call or a plugin default); a name that is not a plain identifier is an
// error wrapping [ormlock.ErrInvalidArgument]. A table of an earlier version
// is upgraded in place. It runs on its own connection of db's primary pool,
// not in db's transaction. See docs/PROTOCOL.md (The ledger).
func Migrate(db *gorm.DB, opts ...ormlock.Option) error {
	_, cfg, err := open(db, "gormlock.Migrate", opts, nil)
	if err != nil {
		return err
	}
	wait := max(cfg.Wait, ledger.MigrateWait)
	// the table lock is the same whatever the namespace: services with
	// different namespaces may share the table
	opts = append(opts[:len(opts):len(opts)], ormlock.WithWait(wait), ormlock.WithNamespace(""))
	c, err := prepare(db, "Migrate", ledger.MigrateKey(cfg.LedgerTable), opts, false)
	if err != nil {
		return err
	}
	sqlDB, err := primarySQL(c.db)
	if err != nil {
		return err
	}
	return ledger.Migrate(c.ctx, sqlDB, c.op)
}
