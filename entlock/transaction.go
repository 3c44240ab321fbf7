package entlock

import (
	"context"
	"fmt"
	"reflect"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/verbs"
)

// TxLike is what the verbs need of a transaction: ent's generated *ent.Tx
// (and dialect.Tx) have both methods.
type TxLike interface {
	Commit() error
	Rollback() error
}

// Transaction runs fn inside one ent transaction while the lock named by key
// is held, and returns fn's error unchanged; key is a name, an id or an
// [ormlock.Key]. It tries once ([ormlock.ErrNotAcquired] when the lock is
// held, fn not called) unless [ormlock.WithWait] is given. client is the
// generated *ent.Client built on a [Driver]; T is inferred from its Tx
// method, and an unwrapped client gives [ErrNotWrapped]. Protocol per
// dialect, cancellation and nesting: docs/PROTOCOL.md.
func Transaction[T TxLike, K ormlock.KeyType](ctx context.Context, client interface {
	Tx(context.Context) (T, error)
}, key K, fn func(tx T) error, opts ...ormlock.Option) error {
	return verbs.TransactionOf[T](ctx, &call[T]{x: client, fn: fn}, pkg, keys.Of[ormlock.Key](key), fn == nil, opts)
}

// call is entlock's verbs.Driver for one call of Transaction or RunOnce
// with fn through the client x. Its binding builds ent's transaction
// through the Driver under x (x.Tx answers the call's request with a
// lockedTx, whose transaction begins once the lock is taken: Locked); in
// claim mode fn's transaction is one of its own (Claimed, workTx). fn's
// fencing token, slot and context are recorded against the tx it is
// given while fn runs (FencingToken, Slot, Context).
type call[T TxLike] struct {
	x interface {
		Tx(context.Context) (T, error)
	}
	fn func(tx T) error
	r  request // x.Tx's request, answered by the Driver
	tx T       // ent's transaction over r.tx
}

func (c *call[T]) Nil() string { return verbs.NilIf(isNil(c.x), "client") }

func (c *call[T]) Bind(ctx context.Context, verb string, opts []config.Option) (verbs.Pool, error) {
	c.r.verb = verb
	tx, d, err := driverOf(ctx, c.x, &c.r)
	if err != nil {
		return verbs.Pool{}, err
	}
	c.tx = tx
	return driverBinder{d}.Bind(ctx, verb, opts)
}

// Locked begins ent's transaction, built at the binding, on lt.
func (c *call[T]) Locked(ctx context.Context, op *lockproto.Op, lt *lockproto.LockedTx) (T, lockproto.Ender, error) {
	t := c.r.tx.(*lockedTx)
	t.lt, t.ExecQuerier = lt, lt.Tx
	return c.tx, record(ctx, c.tx, op), nil
}

// Claimed begins fn's own transaction of claim mode (workTx), through x.
func (c *call[T]) Claimed(ctx context.Context, _ verbs.Pool, op *lockproto.Op) (T, lockproto.Ender, error) {
	tx, err := begin(ctx, c.x, &request{verb: c.r.verb, op: op, work: true})
	if err != nil {
		return tx, nil, err
	}
	return tx, record(op.TokenContext(ctx), tx, op), nil
}

func (c *call[T]) Call(_ context.Context, tx T) error { return c.fn(tx) }

// begin has client.Tx start the transaction that r asks the Driver under
// client for (see request), and returns ent's transaction over it.
func begin[T TxLike](ctx context.Context, client interface {
	Tx(context.Context) (T, error)
}, r *request) (T, error) {
	var zero T
	done := false
	defer func() {
		if !done && r.tx != nil { // client.Tx panicked after the transaction began
			_ = r.tx.Rollback()
		}
	}()
	tx, err := client.Tx(r.with(ctx))
	done = true
	if err != nil {
		if r.tx != nil { // the transaction began, but ent did not take it
			_ = r.tx.Rollback()
		}
		return zero, errs.Wrap(err, "entlock.%s: start transaction", r.verb)
	}
	if r.tx == nil {
		_ = tx.Rollback()
		return zero, fmt.Errorf("%w: entlock.%s: %T: build the client with ent.Driver(entlock.Wrap(drv))", ErrNotWrapped, r.verb, client)
	}
	return tx, nil
}

func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return rv.IsNil()
	}
	return false
}
