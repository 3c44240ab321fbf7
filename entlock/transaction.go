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
	k, err := check(ctx, "Transaction", client, fn == nil, keys.Of[ormlock.Key](key), opts)
	if err != nil {
		return err
	}
	r := &request{verb: "Transaction", key: k, opts: opts}
	tx, err := begin(ctx, client, r)
	if err != nil {
		return err
	}
	defer recordToken(tx, r)()
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

// check validates the arguments every verb shares and returns the key.
func check(ctx context.Context, verb string, client any, nilFn bool, k keys.Key, opts []ormlock.Option) (keys.Key, error) {
	if ctx == nil {
		return k, fmt.Errorf("%w: entlock.%s: nil context", ormlock.ErrInvalidArgument, verb)
	}
	if isNil(client) {
		return k, fmt.Errorf("%w: entlock.%s: nil client", ormlock.ErrInvalidArgument, verb)
	}
	if nilFn {
		return k, fmt.Errorf("%w: entlock.%s: nil fn", ormlock.ErrInvalidArgument, verb)
	}
	if err := k.Validate(); err != nil {
		return k, err
	}
	if err := config.New(opts...).Err(); err != nil {
		return k, err
	}
	return k, nil
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
