package entlock

import (
	"context"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/ledger"
	"github.com/ormlock/ormlock/internal/lockproto"
)

// Migrate creates the [RunOnce] ledger table, and the fence table of
// [ormlock.WithFencing], if they do not exist: the same tables as every
// other adapter's Migrate, so they can all share them. Calling it again
// is harmless, and replicas may all call it at start-up. x is the client or the
// *Driver, as for [Session]; the table is "ormlock_runs" or
// [ormlock.WithLedgerTable]'s, and a name that is not a plain identifier is
// an error wrapping [ormlock.ErrInvalidArgument]. The tables are not part of
// ent's schema. See docs/PROTOCOL.md (The ledger).
func Migrate[T TxLike](ctx context.Context, x interface {
	Tx(context.Context) (T, error)
}, opts ...ormlock.Option) error {
	const verb = "Migrate"
	d, cfg, err := open(ctx, verb, x, opts, nil)
	if err != nil {
		return err
	}
	// the table lock is the same whatever the namespace
	cfg = cfg.With(ormlock.WithWait(max(cfg.Wait, ledger.MigrateWait)), ormlock.WithNamespace(""))
	op, err := lockproto.NewOp(d.dial, verb, ledger.MigrateKey(cfg.LedgerTable), cfg)
	if err != nil {
		return err
	}
	if err := lockproto.Ended(ctx); err != nil {
		return err
	}
	if err := op.CheckServer(ctx, d.db); err != nil {
		return err
	}
	return ledger.Migrate(ctx, d.db, op)
}
