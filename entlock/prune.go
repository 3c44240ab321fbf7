package entlock

import (
	"context"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/ledger"
)

// Prune deletes the ledger rows of finished runs ('done' or 'failed') whose
// slot is more than olderThan before now by the database server's clock,
// and returns how many it deleted: gormlock.Prune's twin (never a 'running'
// claim, short batches, only the namespace in effect, olderThan longer than
// the longest period of the jobs, and at least the catch-up window of
// [ormlock.WithCatchUp] given with it plus 1 minute). x is the client or
// the *Driver, as for [Session]; it works through the pool, outside any
// transaction. See docs/PROTOCOL.md (The ledger).
func Prune[T TxLike](ctx context.Context, x interface {
	Tx(context.Context) (T, error)
}, olderThan time.Duration, opts ...ormlock.Option) (int64, error) {
	const verb = "Prune"
	d, cfg, err := open(ctx, verb, x, opts, ledger.CheckPrune("entlock."+verb, olderThan))
	if err == nil {
		err = ledger.CheckCatchUp("entlock."+verb, olderThan, cfg)
	}
	if err != nil {
		return 0, err
	}
	t, err := ledger.NewTable(d.dial, cfg.LedgerTable)
	if err == nil {
		err = checkPool(ctx, d)
	}
	if err != nil {
		return 0, err
	}
	return t.PruneOlderThan(ctx, d.db, cfg.Namespace, olderThan, ledger.PruneBatch)
}
