package entlock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"

	"github.com/ormlock/ormlock"
)

// TxLike is what the verbs need of a transaction: ent's generated *ent.Tx
// (and dialect.Tx) have both methods.
type TxLike interface {
	Commit() error
	Rollback() error
}

// Transaction runs fn inside one ent transaction while the lock named by key
// is held, and returns fn's error unchanged. client is the generated
// *ent.Client, built on a [Driver] (see [Wrap]); T, the generated *ent.Tx, is
// inferred from its Tx method. key is a name (string), an id (int64 or int)
// or an [ormlock.Key].
//
// By default it tries once: when another holder has the lock, fn is not
// called and the error wraps [ormlock.ErrNotAcquired]. With
// [ormlock.WithWait] it waits up to that long; when ctx ends the wait, the
// error matches both ErrNotAcquired and ctx's error. Options apply on top of
// the defaults given to [Wrap].
//
// When fn returns nil the transaction is committed and a commit error is
// returned (if ctx ended while fn ran, the transaction is rolled back instead
// and the error matches ctx's error: the lock is held until fn returns, not
// dropped when ctx ends); when fn fails the transaction is rolled back, and a rollback
// failure is added to fn's error (still matched by errors.Is) rather than
// hiding it. A panic in fn rolls back, releases the lock and panics again.
// The lock is released after the COMMIT or ROLLBACK, on every path: on
// PostgreSQL with the transaction itself (pg_try_advisory_xact_lock), on
// MySQL/MariaDB by RELEASE_LOCK on the transaction's pinned connection,
// which is destroyed if the release fails.
//
// If client's driver is not a [Driver], ent's transaction is rolled back and
// the error wraps [ErrNotWrapped]; fn is not called. See the package
// documentation for nested calls.
func Transaction[T TxLike, K ormlock.KeyType](ctx context.Context, client interface {
	Tx(context.Context) (T, error)
}, key K, fn func(tx T) error, opts ...ormlock.Option) error {
	k, err := check(ctx, "Transaction", client, fn == nil, ormlock.KeyOf(key), opts)
	if err != nil {
		return err
	}
	r := &request{verb: "Transaction", key: k, opts: opts}
	tx, err := begin(ctx, client, r)
	if err != nil {
		return err
	}
	defer recordToken(tx, r)()
	return run("Transaction", tx, fn)
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
		return zero, fmt.Errorf("ormlock: entlock.%s: start transaction: %w", r.verb, err)
	}
	if r.tx == nil {
		_ = tx.Rollback()
		return zero, fmt.Errorf("%w: entlock.%s: %T: build the client with ent.Driver(entlock.Wrap(drv))", ErrNotWrapped, r.verb, client)
	}
	return tx, nil
}

// run calls fn and ends tx: commit when fn returns nil, rollback when it
// fails or panics. verb names the caller in a commit error.
func run[T TxLike](verb string, tx T, fn func(tx T) error) error {
	done := false
	defer func() {
		if !done { // fn panicked or called runtime.Goexit
			_ = tx.Rollback()
		}
	}()
	err := fn(tx)
	done = true
	if err != nil {
		// ErrTxDone: fn ended the transaction itself.
		if rerr := tx.Rollback(); rerr != nil && !errors.Is(rerr, sql.ErrTxDone) {
			return fmt.Errorf("%w (ormlock: rollback failed: %w)", err, rerr)
		}
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("ormlock: entlock.%s: commit: %w", verb, err)
	}
	return nil
}

// check validates the arguments every verb shares and returns the key.
func check(ctx context.Context, verb string, client any, nilFn bool, k ormlock.Key, opts []ormlock.Option) (ormlock.Key, error) {
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
	if err := ormlock.NewConfig(opts...).Err(); err != nil {
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
