package gormlock

import (
	"context"
	"fmt"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
)

// Session holds the lock named by key on a dedicated connection for as long
// as fn runs; fn does its work through the normal pool (use
// db.WithContext(ctx) inside it), not inside one long transaction.
//
// The lock connection is checked every keepalive interval
// ([ormlock.WithKeepalive], default [ormlock.DefaultKeepalive]); when it is
// lost (backend terminated, KILL CONNECTION, server restart, failover), fn's
// context is cancelled with cause [ormlock.ErrLockLost] within two intervals
// and Session returns an error wrapping ErrLockLost, also when fn returns
// ctx.Err(). Try-once, waiting and the not-acquired error are as in
// [Transaction].
//
// On PostgreSQL the lock is a transaction-level advisory lock held by an idle
// READ COMMITTED transaction on the dedicated connection: correct behind
// PgBouncer in transaction mode (which breaks session-level advisory locks)
// and holding no snapshot, so VACUUM is not held back. The dedicated
// connection counts against the pool (and PgBouncer's pool) while fn runs, so
// a pool of MaxOpenConns 1 cannot serve fn's own queries: size the pool with
// one connection per running Session to spare.
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
