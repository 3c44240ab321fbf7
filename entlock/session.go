package entlock

import (
	"context"
	"fmt"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/lockproto"
)

// Session holds the lock named by key on a dedicated connection for as long
// as fn runs; fn does its work through the normal client (with the ctx it is
// given), not inside one long transaction.
//
// x is either the generated *ent.Client built on a [Driver], or the *Driver
// itself: both have a Tx method, from which T is inferred. A client does not
// expose its driver, so Session finds it by calling client.Tx with a probe in
// the context, which the Driver answers without starting a transaction. (If
// the client's driver is not a Driver, that call starts a real transaction,
// which is rolled back, and the error wraps [ErrNotWrapped].)
//
// The lock connection is checked every keepalive interval
// ([ormlock.WithKeepalive], default [ormlock.DefaultKeepalive]); when it is
// lost (backend terminated, KILL CONNECTION, server restart, failover), fn's
// context is cancelled with cause [ormlock.ErrLockLost] within two intervals
// and Session returns an error wrapping ErrLockLost, also when fn returns
// ctx.Err(). Try-once, waiting and the not-acquired error are as in
// [Transaction]; options apply on top of the defaults given to [Wrap].
//
// On PostgreSQL the lock is a transaction-level advisory lock held by an idle
// READ COMMITTED transaction on the dedicated connection: correct behind
// PgBouncer in transaction mode and holding no snapshot, so VACUUM is not
// held back. On MySQL/MariaDB it is GET_LOCK on the dedicated connection,
// released by RELEASE_LOCK (or by destroying the connection when that
// fails). The dedicated connection counts against the pool while fn runs:
// a pool of MaxOpenConns 1 cannot serve fn's own queries.
func Session[T TxLike, K ormlock.KeyType](ctx context.Context, x interface {
	Tx(context.Context) (T, error)
}, key K, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
	k, err := check(ctx, "Session", x, fn == nil, ormlock.KeyOf(key), opts)
	if err != nil {
		return err
	}
	d, err := driverOf(ctx, "Session", x)
	if err != nil {
		return err
	}
	if d.err != nil {
		return d.err
	}
	op, err := lockproto.NewOp(d.dial, "Session", k, d.cfg.With(opts...))
	if err != nil {
		return err
	}
	if err := op.CheckServer(ctx, d.db); err != nil {
		return err
	}
	return op.Session(ctx, d.db, fn)
}

// driverOf returns x itself when it is a *Driver, else asks x's Tx method for
// the Driver under it with a probe.
func driverOf[T TxLike](ctx context.Context, verb string, x interface {
	Tx(context.Context) (T, error)
}) (*Driver, error) {
	if d, ok := any(x).(*Driver); ok {
		return d, nil
	}
	r := &request{verb: verb, probe: true}
	tx, err := x.Tx(r.with(ctx))
	if r.drv != nil {
		if err == nil { // a layer between client and Driver ignored the probe's error
			_ = tx.Rollback()
		}
		return r.drv, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: entlock.%s: cannot reach the driver of %T through its Tx method: %w", ormlock.ErrInvalidArgument, verb, x, err)
	}
	_ = tx.Rollback()
	return nil, fmt.Errorf("%w: entlock.%s: %T: build the client with ent.Driver(entlock.Wrap(drv))", ErrNotWrapped, verb, x)
}
