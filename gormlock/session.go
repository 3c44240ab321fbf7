package gormlock

import (
	"context"
	"fmt"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
)

// Session holds the lock named by key on a dedicated connection for as long
// as fn runs; fn does its work through the normal pool (use
// db.WithContext(ctx) inside it), not inside one long transaction. It is for
// jobs too long for [Transaction].
//
// Acquisition is as in [Transaction]: try once by default, or wait with
// [ormlock.WithWait]; when another holder has the lock, fn is not called and
// the error wraps [ormlock.ErrNotAcquired] (and the context's error when
// GORM's context, db.WithContext, ended the wait).
//
// The lock connection is checked every keepalive interval
// ([ormlock.WithKeepalive], default [ormlock.DefaultKeepalive]), each check
// bounded by one interval. When a check fails (backend terminated, KILL
// CONNECTION, server or PgBouncer restart, failover, a hung server), fn's
// context is cancelled with cause [ormlock.ErrLockLost] within two
// intervals: test context.Cause(ctx) with errors.Is. Session then returns an
// error wrapping ErrLockLost, joined with fn's own error, so it also matches
// when fn returns ctx.Err(). A loss that happens after the last check is
// found by the release and reported the same way. The caller cancelling
// GORM's context ends fn's context with the caller's cause; that is not a
// loss. Choose an interval well above the round-trip time of a busy server:
// a check that times out counts as a loss.
//
// fn's error is returned unchanged when the lock was held throughout; a
// panic in fn releases the lock and goes on. The lock is released on every
// path with a context that ignores the caller's cancellation; when the
// release fails or is not confirmed, the dedicated connection is destroyed
// rather than given back to the pool, so the server frees the lock.
//
// On PostgreSQL the lock is a transaction-level advisory lock held by an
// idle READ COMMITTED transaction on the dedicated connection: correct
// behind PgBouncer in transaction mode (which breaks session-level advisory
// locks), and holding no snapshot (backend_xmin stays NULL), so VACUUM is
// not held back. The transaction's only work is the lock; ROLLBACK releases
// it. The keepalive is shortened to a third of the session's
// idle_in_transaction_session_timeout, if set, so the server does not end
// the transaction, and PostgreSQL 17's transaction_timeout is turned off for
// the lock transaction alone (SET LOCAL); a timeout the server does not
// show (PgBouncer's idle_transaction_timeout) must be longer than the
// keepalive, or the lock is reported lost.
//
// On MySQL/MariaDB the lock is GET_LOCK on the dedicated connection, whose
// wait_timeout is raised (never lowered) so that an idle timeout cannot drop
// the lock, and set back to the connection's own value before it returns to
// the pool; the keepalive checks that the lock still names the connection.
//
// The dedicated connection counts against db's MaxOpenConns (and
// PgBouncer's pool) while fn runs, so a pool of MaxOpenConns 1 cannot serve
// fn's own queries: size the pool with one connection per running Session to
// spare.
func Session[K ormlock.KeyType](db *gorm.DB, key K, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
	if fn == nil {
		return fmt.Errorf("%w: gormlock.Session: nil fn", ormlock.ErrInvalidArgument)
	}
	c, err := prepare(db, "Session", ormlock.KeyOf(key), opts)
	if err != nil {
		return err
	}
	sqlDB, err := primarySQL(c.db)
	if err != nil {
		return err
	}
	return c.op.Session(c.ctx, sqlDB, fn)
}
