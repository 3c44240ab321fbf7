package verbs

import (
	"context"

	"github.com/ormlock/ormlock/internal/lockproto"
)

// nestedRate is inLockTx for a rate limit (keys.Rate) when the handle is
// inside the caller's open transaction p.Tx: the token is taken in that
// transaction (lockproto.TakeRate), in a savepoint around the take and fn
// unless n says otherwise, so that fn's failure gives it back (ROLLBACK
// TO SAVEPOINT) and the caller's COMMIT or ROLLBACK decides the rest. The
// key's missing rows are inserted on the primary's pool (n.TokenDB).
// Without a savepoint (GORM's DisableNestedTransaction) the token is the
// caller's transaction's alone: it is given back only when that one rolls
// back.
func nestedRate[TTx any, D Driver[TTx]](ctx context.Context, d D, n Nester[TTx], p Pool, op *lockproto.Op) error {
	savepoint, err := n.Nest(op)
	if err != nil {
		return err
	}
	db, err := n.TokenDB()
	if err != nil {
		return err
	}
	q := lockproto.Querier(p.Tx)
	defer op.EndXact(ctx)
	body := func() error {
		if err := lockproto.TakeRate(ctx, op, q, db); err != nil {
			return err
		}
		return d.Call(ctx, n.InCallerTx(ctx))
	}
	if !savepoint {
		return body()
	}
	return lockproto.InSavepoint(ctx, op, q, body)
}
