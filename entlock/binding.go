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
// driver) and its defaults. Transaction and RunOnce reach the Driver
// through x.Tx itself, which binds with driverBinder.
type binder[T TxLike] struct {
	x interface {
		Tx(context.Context) (T, error)
	}
}

func (b binder[T]) Nil() string { return verbs.NilIf(isNil(b.x), "client") }

func (b binder[T]) Bind(ctx context.Context, verb string, opts []config.Option) (verbs.Pool, error) {
	d, err := driverOf(ctx, verb, b.x)
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
