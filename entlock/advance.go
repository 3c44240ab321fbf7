package entlock

import (
	"context"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/ledger"
)

// AdvanceFences adds by to every fencing counter of the namespace in
// effect and returns how many it moved: gormlock.AdvanceFences' twin, the
// remedy after promoting an asynchronous replica. x is the client or the
// *Driver, as for [Session]; it works through the pool, outside any
// transaction. See docs/PROTOCOL.md (Failover).
func AdvanceFences[T TxLike](ctx context.Context, x interface {
	Tx(context.Context) (T, error)
}, by int64, opts ...ormlock.Option) (int64, error) {
	const verb = "AdvanceFences"
	d, cfg, err := open(ctx, verb, x, opts, ledger.CheckAdvance("entlock."+verb, by))
	if err != nil {
		return 0, err
	}
	return ledger.AdvanceFences(ctx, d.db, d.dial, "entlock."+verb, by, cfg)
}
