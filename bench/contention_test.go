package bench_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/keyhash"
	"github.com/ormlock/ormlock/pgxlock"
)

// BenchmarkContention runs pgxlock.Transaction, gormlock.Transaction and
// the hand-written protocol on pgx (BEGIN; SELECT
// pg_try_advisory_xact_lock($1); COMMIT) with an empty fn from 64, 128 and
// 256 goroutines on one loopback PostgreSQL, every goroutine on a key of
// its own (every attempt free), on a pool of 16 connections: what it
// measures is the client's process-wide shared state, which mutex and
// block profiles show (docs/BENCHMARKS.md, Contention at 64, 128 and 256 goroutines):
//
//	cd bench && go test -run '^$' -bench 'BenchmarkContention/pgxlock/g=256' -benchtime 20000x \
//	    -mutexprofile mutex.out -blockprofile block.out .
//	go tool pprof -top -contentions mutex.out
func BenchmarkContention(b *testing.B) {
	const conns = 16
	dsn := testdb.DSN(b, testdb.Postgres)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns, cfg.MinConns = conns, conns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	gdb, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Discard, SkipDefaultTransaction: true})
	if err != nil {
		b.Fatal(err)
	}
	sdb, err := gdb.DB()
	if err != nil {
		b.Fatal(err)
	}
	sdb.SetMaxOpenConns(conns)
	sdb.SetMaxIdleConns(conns)
	b.Cleanup(func() { testdb.AssertNoLeaks(b, testdb.Postgres, sdb) })
	var seq atomic.Int64
	calls := []struct {
		name string
		call func(key string) error
	}{
		{"pgxlock", func(key string) error {
			return pgxlock.Transaction(ctx, pool, key, func(context.Context, pgx.Tx) error { return nil })
		}},
		{"gormlock", func(key string) error {
			return gormlock.Transaction(gdb.WithContext(ctx), key, func(*gorm.DB) error { return nil })
		}},
		{"handwritten", func(key string) error { return handwrittenPgx(ctx, pool, keyhash.Int64(key)) }},
		{"handwritten-sql", func(key string) error { return testdb.Handwritten(ctx, testdb.Postgres, sdb, key) }},
	}
	for _, c := range calls {
		for _, g := range []int{64, 128, 256} {
			b.Run(fmt.Sprintf("%s/g=%d", c.name, g), func(b *testing.B) {
				b.ReportAllocs()
				defer testdb.ReportCPU(b)()
				b.SetParallelism(max(1, g/runtime.GOMAXPROCS(0)))
				b.RunParallel(func(pb *testing.PB) {
					key := fmt.Sprintf("contention-%d", seq.Add(1))
					for pb.Next() {
						if err := c.call(key); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

// handwrittenPgx is the hand-written protocol on a pgx pool.
func handwrittenPgx(ctx context.Context, pool *pgxpool.Pool, key int64) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	var ok bool
	if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1)", key).Scan(&ok); err != nil || !ok {
		_ = tx.Rollback(ctx)
		if err == nil {
			err = fmt.Errorf("key %d held", key)
		}
		return err
	}
	return tx.Commit(ctx)
}
