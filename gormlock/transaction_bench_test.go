package gormlock_test

import (
	"context"
	"database/sql"
	"syscall"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/keyhash"
)

// BenchmarkTransaction compares gormlock.Transaction (empty fn) with a
// hand-written database/sql version of the same protocol and with a plain
// GORM transaction that takes no lock, side by side in one run:
//
//	go test -run '^$' -bench BenchmarkTransaction -benchmem -count 6 ./gormlock/
func BenchmarkTransaction(b *testing.B) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer, testdb.MariaDB} {
		b.Run(string(k), func(b *testing.B) {
			sqlDB := testdb.Open(b, k)
			db := benchGorm(b, k, sqlDB)
			name := "bench-" + b.Name()
			noop := func(*gorm.DB) error { return nil }
			b.Run("gormlock", func(b *testing.B) {
				b.ReportAllocs()
				defer reportCPU(b)()
				for b.Loop() {
					if err := gormlock.Transaction(db, name, noop); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("handwritten", func(b *testing.B) {
				b.ReportAllocs()
				defer reportCPU(b)()
				ctx := context.Background()
				for b.Loop() {
					if err := handwritten(ctx, k, sqlDB, name); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("gorm-no-lock", func(b *testing.B) {
				b.ReportAllocs()
				defer reportCPU(b)()
				for b.Loop() {
					if err := db.Transaction(noop); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

func benchGorm(b *testing.B, k testdb.Kind, sqlDB *sql.DB) *gorm.DB {
	return gormOnTB(b, k, sqlDB)
}

// handwritten is the protocol as a careful user would write it with
// database/sql alone.
func handwritten(ctx context.Context, k testdb.Kind, db *sql.DB, name string) error {
	if k.Dialect() == "postgres" {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		var ok bool
		if err := tx.QueryRowContext(ctx, "SELECT pg_try_advisory_xact_lock($1)", keyhash.Int64(name)).Scan(&ok); err != nil || !ok {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	lockName := keyhash.MySQLName("", name)
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", lockName).Scan(&got); err != nil || got.Int64 != 1 {
		return err
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	err = tx.Commit()
	var rel sql.NullInt64
	if rerr := conn.QueryRowContext(context.WithoutCancel(ctx), "SELECT RELEASE_LOCK(?)", lockName).Scan(&rel); rerr != nil {
		return rerr
	}
	return err
}

// reportCPU returns a function that reports the process's own CPU time
// (user and system, the servers excluded) per iteration as cpu-ns/op: on a
// loopback server, where a round trip costs little, it is the client-side
// cost of a call, and less sensitive than ns/op to other load on the
// machine. Call it before b.Loop and defer the result.
func reportCPU(b *testing.B) func() {
	b.Helper()
	start := processCPU(b)
	return func() {
		if b.N > 0 {
			b.ReportMetric(float64(processCPU(b)-start)/float64(b.N), "cpu-ns/op")
		}
	}
}

func processCPU(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
