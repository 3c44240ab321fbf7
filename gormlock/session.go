package gormlock

import (
	"context"
	"database/sql"
	"fmt"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/keys"
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
	c, sqlDB, err := sessionCall(db, "Session", keys.Of[ormlock.Key](key), fn, opts, false)
	if err != nil {
		return err
	}
	return c.op.Session(c.ctx, sqlDB, fn)
}

// sessionCall checks a call of a verb that holds the lock on a connection
// of its own (Session, Lead) and returns it with db's primary pool. With
// campaign (Lead), a connection error of the server check at the end of
// init is not returned but left to the campaign's retries.
func sessionCall(db *gorm.DB, verb string, key keys.Key, fn func(ctx context.Context) error, opts []ormlock.Option, campaign bool) (*call, *sql.DB, error) {
	if fn == nil {
		return nil, nil, fmt.Errorf("%w: gormlock.%s: nil fn", ormlock.ErrInvalidArgument, verb)
	}
	c := new(call)
	if err := c.init(db, verb, key, opts, true); err != nil {
		if !campaign || c.op == nil || lockproto.Permanent(err) {
			return nil, nil, err
		}
	}
	sqlDB, err := primarySQL(c.db)
	if err != nil {
		return nil, nil, err
	}
	return c, sqlDB, nil
}
