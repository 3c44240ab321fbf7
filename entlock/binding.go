package entlock

import (
	"context"
	"fmt"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/verbs"
)

const pkg = "entlock"

// binder is entlock's binding of the verb core for the verbs that need no
// transaction of ent (Session, Lead, Migrate, Holder, Runs, Prune,
// AdvanceFences, RunScheduled's catch-up): the [Driver] under x (found by
// a probe through x's Tx method, the only way ent's client exposes its
// driver) and its defaults. Transaction and RunOnce bind with call, whose
// request to x.Tx finds the Driver and builds ent's transaction at once.
type binder[T TxLike] struct {
	x interface {
		Tx(context.Context) (T, error)
	}
}

func (b binder[T]) Nil() string { return verbs.NilIf(isNil(b.x), "client") }

func (b binder[T]) Bind(ctx context.Context, verb string, opts []config.Option) (verbs.Pool, error) {
	_, d, err := driverOf(ctx, b.x, &request{verb: verb, probe: true})
	if err != nil {
		return verbs.Pool{}, err
	}
	return driverBinder{d}.Bind(ctx, verb, opts)
}

// driverBinder binds a [Driver]: its failed wrapping (every verb returns
// that error), its dialect, its *sql.DB and its defaults with the call's
// options.
type driverBinder struct{ d *Driver }

func (b driverBinder) Nil() string { return "" }

func (b driverBinder) Bind(_ context.Context, _ string, opts []config.Option) (verbs.Pool, error) {
	if b.d.err != nil {
		return verbs.Pool{}, b.d.err
	}
	return verbs.Pool{Pkg: pkg, Dialect: b.d.dial, DB: b.d.db, Cfg: b.d.cfg.With(opts...)}, nil
}

// driverOf asks x's Tx method, the only way ent's client exposes its
// driver, for the Driver under x with the request r: a probe (r.probe),
// which starts no transaction, or the request of a verb's transaction,
// answered with ent's transaction over the lockedTx that the lock's
// transaction will fill in (call.Locked). A probe of a *Driver is answered
// at once.
func driverOf[T TxLike](ctx context.Context, x interface {
	Tx(context.Context) (T, error)
}, r *request) (T, *Driver, error) {
	var zero T
	if d, ok := any(x).(*Driver); ok && r.probe {
		return zero, d, nil
	}
	tx, err := x.Tx(r.with(ctx))
	switch {
	case r.drv != nil && !r.probe && err == nil:
		return tx, r.drv, nil
	case r.drv != nil && r.probe:
		if err == nil { // a layer between client and Driver ignored the probe's error
			_ = tx.Rollback()
		}
		return zero, r.drv, nil
	case err != nil:
		return zero, nil, fmt.Errorf("%w: entlock.%s: cannot reach the driver of %T through its Tx method: %w", ormlock.ErrInvalidArgument, r.verb, x, err)
	}
	_ = tx.Rollback()
	return zero, nil, fmt.Errorf("%w: entlock.%s: %T: build the client with ent.Driver(entlock.Wrap(drv))", ErrNotWrapped, r.verb, x)
}
