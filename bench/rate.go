package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/sqllock"
)

// Rate limiters side by side: ormlock.Rate (a token row taken in the
// transaction), a plain transaction (the floor: what a limit inside the
// transaction costs on top of it), and a Redis limiter (a generic cell
// rate algorithm in Lua, one round trip, which gives nothing back when the
// work it admitted fails).

// Rate contender names.
const (
	CRateTransaction = "sqllock.Transaction(Rate)"
	CRatePlainTx     = "database/sql tx, no limit (reference)"
	CRateRedisGCRA   = "go-redis GCRA (Lua)"
)

// RateContenders returns the rate limiters, each limiting a key to n per
// per, in report order.
func RateContenders(n int, per time.Duration) []Contender {
	return []Contender{
		{Name: CRateTransaction, On: onSQL, Open: func(ctx context.Context, t Target, conns int) (Instance, error) {
			return openRateTx(ctx, t, conns, n, per)
		}},
		{Name: CRatePlainTx, Reference: true, On: onSQL, Open: openRatePlain},
		{Name: CRateRedisGCRA, On: onRedis, Open: func(_ context.Context, t Target, conns int) (Instance, error) {
			c, err := t.openRedis(conns + 2)
			if err != nil {
				return nil, err
			}
			return &redisGCRA{c: c, interval: per.Microseconds() / int64(n), per: per.Microseconds()}, nil
		}},
	}
}

// errNoHold: a rate limiter has no holder to lose to.
var errNoHold = errors.New("bench: a rate limiter holds nothing")

// rateTx is sqllock.Transaction of ormlock.Rate(key, n, per).
type rateTx struct {
	db  *sql.DB
	n   int
	per time.Duration
}

func openRateTx(ctx context.Context, t Target, conns, n int, per time.Duration) (Instance, error) {
	db, err := t.openSQL(conns)
	if err != nil {
		return nil, err
	}
	if err := sqllock.Migrate(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("bench: migrate %s: %w", t.Name, err)
	}
	return &rateTx{db: db, n: n, per: per}, nil
}

// Bind takes a token of key inside the transaction that crit runs in; a
// refusal is (false, nil).
func (r *rateTx) Bind(key string, crit func()) Attempt {
	k, db := ormlock.Rate(key, r.n, r.per), r.db
	fn := func(context.Context, *sql.Tx) error { crit(); return nil }
	return func(ctx context.Context) (bool, error) {
		err := sqllock.Transaction(ctx, db, k, fn)
		if errors.Is(err, ormlock.ErrNotAcquired) {
			return false, nil
		}
		return err == nil, err
	}
}

func (r *rateTx) Hold(context.Context, string) (func() error, error) { return nil, errNoHold }
func (r *rateTx) Pools() []*sql.DB                                   { return []*sql.DB{r.db} }
func (r *rateTx) Close() error                                       { return r.db.Close() }

// ratePlain is an empty database/sql transaction around crit: BEGIN,
// COMMIT.
type ratePlain struct{ db *sql.DB }

func openRatePlain(_ context.Context, t Target, conns int) (Instance, error) {
	db, err := t.openSQL(conns)
	if err != nil {
		return nil, err
	}
	return ratePlain{db}, nil
}

func (p ratePlain) Bind(_ string, crit func()) Attempt {
	db := p.db
	return func(ctx context.Context) (bool, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return false, err
		}
		crit()
		return true, tx.Commit()
	}
}

func (p ratePlain) Hold(context.Context, string) (func() error, error) { return nil, errNoHold }
func (p ratePlain) Pools() []*sql.DB                                   { return []*sql.DB{p.db} }
func (p ratePlain) Close() error                                       { return p.db.Close() }

// gcraScript is a generic cell rate algorithm, one EVALSHA per attempt:
// the key holds the theoretical arrival time (TAT) in microseconds by
// Redis's clock; an attempt at now is admitted when max(TAT, now) +
// interval - now <= per (at most per/interval = n within any per), and
// then stores that as the new TAT, expiring with it. A refusal returns how
// long until it would be admitted.
var gcraScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local per = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local next = tat + interval
if next - now > per then
  return next - now - per
end
redis.call('SET', KEYS[1], next, 'PX', math.ceil((next - now) / 1000) + 1)
return -1
`)

// redisGCRA is the Lua limiter above on go-redis.
type redisGCRA struct {
	c             *redis.Client
	interval, per int64
}

func (r *redisGCRA) Bind(key string, crit func()) Attempt {
	c, keys, interval, per := r.c, []string{"ormlock-bench-gcra:" + key}, r.interval, r.per
	return func(ctx context.Context) (bool, error) {
		wait, err := gcraScript.Run(ctx, c, keys, interval, per).Int64()
		if err != nil || wait >= 0 {
			return false, err
		}
		crit()
		return true, nil
	}
}

func (r *redisGCRA) Hold(context.Context, string) (func() error, error) { return nil, errNoHold }
func (r *redisGCRA) Pools() []*sql.DB                                   { return nil }
func (r *redisGCRA) Close() error                                       { return r.c.Close() }
