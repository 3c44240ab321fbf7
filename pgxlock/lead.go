package pgxlock

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/keys"
)

// Lead campaigns for the lock named by key and runs fn while this caller
// leads: it waits for the lock as [Session] does (on the server, asking
// again when a wait runs out, retrying after connection errors with a
// bounded backoff), then calls fn with a ctx that is cancelled with cause
// [ormlock.ErrLockLost] when leadership is lost. When fn returns by itself,
// the lock is released and Lead returns fn's error (nil: resigned); after a
// loss, Lead waits for fn to return and campaigns again. Lead returns the
// context's cause when ctx ends. With [ormlock.WithFencing] every term gets
// a greater token ([ormlock.FencingToken]); [ormlock.WithOwner] names this
// replica for [Holder]. An invalid key or option or a refused login is
// returned at once. See docs/PROTOCOL.md (Lead).
func Lead[K ormlock.KeyType](ctx context.Context, pool *pgxpool.Pool, key K, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
	p, cfg, done, err := open(ctx, "Lead", pool, fn == nil, opts)
	if err != nil {
		return err
	}
	defer done()
	return notPostgres(p.Lead(ctx, keys.Of[ormlock.Key](key), cfg, fn))
}
