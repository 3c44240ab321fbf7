package entlock

import (
	"context"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/ledger"
	"github.com/ormlock/ormlock/internal/lockproto"
)

// Migrate creates the [RunOnce] ledger table if it does not exist (CREATE
// TABLE IF NOT EXISTS; calling it again is harmless): the same table as
// gormlock.Migrate's, so both ORMs can share it. The table is
// the default "ormlock_runs" or the one set with
// [ormlock.WithLedgerTable], per call or given to [Wrap]; the name must be a
// plain identifier (an error wrapping [ormlock.ErrInvalidArgument]
// otherwise, before anything is sent to the server) and is quoted. On
// PostgreSQL it is created in the first schema of the search_path. x is the
// client or the *Driver, as for [Session].
//
// Replicas may all call Migrate at start-up: it holds a lock on the table
// name while it creates it (waiting up to a minute, or the longer
// [ormlock.WithWait]), because concurrent CREATE TABLE IF NOT EXISTS can fail
// on PostgreSQL. It runs on its own connection of the pool. The table is not
// part of ent's schema: client.Schema.Create neither creates nor drops it.
//
// Columns: namespace, job, slot, status ('running', 'done', 'failed'),
// owner, started_at, finished_at, error; primary key (namespace, job, slot);
// times in UTC (timestamptz on PostgreSQL, DATETIME(6) on MySQL/MariaDB). A
// table created by an earlier version, without the namespace column, is
// upgraded in place (existing rows get the empty namespace).
//
// It also creates the fence table of [ormlock.WithFencing]'s tokens, named
// after the ledger table with "_fence" appended ("ormlock_runs_fence" by
// default): one row per fenced key, (namespace, lock_key, token). See
// docs/PROTOCOL.md, Fencing.
func Migrate[T TxLike](ctx context.Context, x interface {
	Tx(context.Context) (T, error)
}, opts ...ormlock.Option) error {
	const verb = "Migrate"
	if err := checkCall(ctx, verb, x, opts); err != nil {
		return err
	}
	d, cfg, err := driverFor(ctx, verb, x, opts)
	if err != nil {
		return err
	}
	// the table lock is the same whatever the namespace
	cfg = cfg.With(ormlock.WithWait(max(cfg.Wait, ledger.MigrateWait)), ormlock.WithNamespace(""))
	op, err := lockproto.NewOp(d.dial, verb, ledger.MigrateKey(cfg.LedgerTable), cfg)
	if err != nil {
		return err
	}
	return ledger.Migrate(ctx, d.db, op)
}
