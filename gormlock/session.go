package gormlock

import (
	"context"
	"fmt"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/lockproto"
)

// Session holds the lock named by key on a dedicated connection for as long
// as fn runs; fn works through the normal pool (db.WithContext(ctx)), not
// inside one long transaction. Acquisition is as in [Transaction]. A
// keepalive ([ormlock.WithKeepalive], default 2s) cancels fn's ctx with
// cause [ormlock.ErrLockLost] when the lock is lost, and Session's error then
// wraps ErrLockLost. Per-dialect mechanism, timeouts and pool sizing: see
// docs/PROTOCOL.md (The verbs on each server, Session).
func Session[K ormlock.KeyType](db *gorm.DB, key K, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
	if fn == nil {
		return fmt.Errorf("%w: gormlock.Session: nil fn", ormlock.ErrInvalidArgument)
	}
	c, err := prepare(db, "Session", lockproto.KeyOf(key), opts)
	if err != nil {
		return err
	}
	sqlDB, err := primarySQL(c.db)
	if err != nil {
		return err
	}
	return c.op.Session(c.ctx, sqlDB, fn)
}
