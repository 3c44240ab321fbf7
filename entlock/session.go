package entlock

import (
	"context"
	"fmt"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/lockproto"
)

// Session holds the lock named by key on a dedicated connection for as long
// as fn runs; fn works through the normal client with the ctx it is given.
// x is the client built on a [Driver], or the *Driver (an unwrapped client
// gives [ErrNotWrapped]). A keepalive ([ormlock.WithKeepalive], default 2s)
// cancels fn's ctx with cause [ormlock.ErrLockLost] when the lock is lost,
// and Session's error then wraps ErrLockLost. See docs/PROTOCOL.md
// (Session).
func Session[T TxLike, K ormlock.KeyType](ctx context.Context, x interface {
	Tx(context.Context) (T, error)
}, key K, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
	op, d, err := sessionOp(ctx, "Session", x, keys.Of[ormlock.Key](key), fn == nil, opts)
	if err != nil {
		return err
	}
	if err := op.CheckServer(ctx, d.db); err != nil {
		return err
	}
	return op.Session(ctx, d.db, fn)
}

// sessionOp validates a Session-like call (Session, Lead) and builds its Op
// on the Driver under x; a context that has ended is an error wrapping
// ormlock.ErrNotAcquired and the context's error, before the server check.
func sessionOp[T TxLike](ctx context.Context, verb string, x interface {
	Tx(context.Context) (T, error)
}, key keys.Key, nilFn bool, opts []ormlock.Option) (*lockproto.Op, *Driver, error) {
	k, err := check(ctx, verb, x, nilFn, key, opts)
	if err != nil {
		return nil, nil, err
	}
	d, err := driverOf(ctx, verb, x)
	if err != nil {
		return nil, nil, err
	}
	if d.err != nil {
		return nil, nil, d.err
	}
	op, err := lockproto.NewOp(d.dial, verb, k, d.cfg.With(opts...))
	if err != nil {
		return nil, nil, err
	}
	if err := op.EndedLock(ctx); err != nil {
		return nil, nil, err
	}
	return op, d, nil
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
