package entlock

import (
	"context"
	"fmt"
	"reflect"

	"github.com/ormlock/ormlock"
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
	if err := verbs.CheckHandle(ctx, pkg, "Transaction", binder[T]{client}.Nil(), verbs.Args{NilFn: fn == nil}); err != nil {
		return err
	}
	r := &request{verb: "Transaction", key: keys.Of[ormlock.Key](key), opts: opts}
	// the hook's Start is called in the driver (Driver.begin), its End
	// here, on every path out (a panic in fn included)
	return lockproto.Ending(func() error {
		tx, err := begin(ctx, client, r)
		if err != nil {
			return err
		}
		return runRecorded(ctx, tx, r, fn)
	}, func(err error) {
		if r.hctx != nil {
			r.op.EndHook(r.hctx, err)
		}
	})
}

// runRecorded runs fn in tx with its fencing token recorded for
// FencingToken(tx).
func runRecorded[T TxLike](ctx context.Context, tx T, r *request, fn func(tx T) error) error {
	defer recordToken(tx, r)()
	if r.hctx != nil {
		defer recordContext(tx, r.op.TokenContext(r.hctx))()
	}
	return run(ctx, "Transaction", tx, fn)
}

// begin has client.Tx start the transaction that r asks the Driver under
// client for (see request), and returns ent's transaction over it.
func begin[T TxLike](ctx context.Context, client interface {
	Tx(context.Context) (T, error)
}, r *request) (T, error) {
	var zero T
	done := false
	defer func() {
		if !done && r.tx != nil { // client.Tx panicked after the lock was taken
			_ = r.tx.Rollback()
		}
	}()
	tx, err := client.Tx(r.with(ctx))
	done = true
	if err != nil {
		if r.tx != nil { // the lock was taken, but ent did not take the transaction
			_ = r.tx.Rollback()
		}
		if r.err != nil {
			return zero, r.err
		}
		return zero, errs.Wrap(err, "entlock.%s: start transaction", r.verb)
	}
	if r.tx == nil {
		_ = tx.Rollback()
		return zero, fmt.Errorf("%w: entlock.%s: %T: build the client with ent.Driver(entlock.Wrap(drv))", ErrNotWrapped, r.verb, client)
	}
	return tx, nil
}

// run calls fn and ends tx: commit when fn returns nil, rollback when it
// fails or panics. verb names the caller in a commit error.
func run[T TxLike](ctx context.Context, verb string, tx T, fn func(tx T) error) error {
	return lockproto.RunTx(ctx, tx, "entlock."+verb, func() error { return fn(tx) })
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
