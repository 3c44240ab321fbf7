package gormlock

import (
	"fmt"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/ledger"
)

// Migrate creates the RunOnce ledger table if it does not exist (CREATE
// TABLE IF NOT EXISTS; calling it again is harmless). The table is
// the default "ormlock_runs" or the one set with
// [ormlock.WithLedgerTable], per call or as a plugin default; the name must
// be a plain identifier (an error wrapping [ormlock.ErrInvalidArgument]
// otherwise, before anything is sent to the server) and is quoted. On
// PostgreSQL it is created in the first schema of the search_path.
//
// Replicas may all call Migrate at start-up: it holds a lock on the table
// name while it creates it (waiting up to a minute, or the longer
// [ormlock.WithWait]), because concurrent CREATE TABLE IF NOT EXISTS can fail
// on PostgreSQL. It runs on its own connection of db's primary pool, not in
// db's transaction.
//
// Columns: namespace, job, slot, status ('running', 'done', 'failed'),
// owner, started_at, finished_at, error; primary key (namespace, job, slot);
// times in UTC (timestamptz on PostgreSQL, DATETIME(6) on MySQL/MariaDB). A
// table created by an earlier version, without the namespace column, is
// upgraded in place: the column is added (existing rows get the empty namespace)
// and the primary key becomes (namespace, job, slot).
//
// It also creates the fence table of [ormlock.WithFencing]'s tokens, named
// after the ledger table with "_fence" appended ("ormlock_runs_fence" by
// default): one row per fenced key, (namespace, lock_key, token). See
// docs/PROTOCOL.md, Fencing.
func Migrate(db *gorm.DB, opts ...ormlock.Option) error {
	if db == nil {
		return fmt.Errorf("%w: gormlock.Migrate: nil *gorm.DB", ormlock.ErrInvalidArgument)
	}
	if db.Error != nil {
		return db.Error
	}
	cfg, err := configFor(db, opts)
	if err != nil {
		return err
	}
	if err := cfg.Err(); err != nil {
		return err
	}
	wait := max(cfg.Wait, ledger.MigrateWait)
	// the table lock is the same whatever the namespace: services with
	// different namespaces may share the table
	opts = append(opts[:len(opts):len(opts)], ormlock.WithWait(wait), ormlock.WithNamespace(""))
	c, err := prepare(db, "Migrate", ledger.MigrateKey(cfg.LedgerTable), opts)
	if err != nil {
		return err
	}
	sqlDB, err := primarySQL(c.db)
	if err != nil {
		return err
	}
	return ledger.Migrate(c.ctx, sqlDB, c.op)
}
