package entlock_test

import (
	"context"
	"database/sql"
	"syscall"
	"testing"
	"time"

	entsql "entgo.io/ent/dialect/sql"

	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/enttest"
	"github.com/ormlock/ormlock/internal/enttest/ent"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/keyhash"
)

// BenchmarkTransaction compares entlock.Transaction (empty fn) with the
// hand-written PostgreSQL protocol (BEGIN; the lock; COMMIT) and with a
// plain ent transaction that takes no lock, side by side in one run:
//
//	go test -run '^$' -bench BenchmarkTransaction -benchmem -count 6 ./entlock/
func BenchmarkTransaction(b *testing.B) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		b.Run(string(k), func(b *testing.B) {
			db := testdb.Open(b, k)
			enttest.Migrate(b, k)
			client := ent.NewClient(ent.Driver(entlock.Wrap(entsql.OpenDB(k.Dialect(), db))))
			plain := ent.NewClient(ent.Driver(entsql.OpenDB(k.Dialect(), db)))
			ctx := context.Background()
			name := "bench-" + b.Name()
			noop := func(*ent.Tx) error { return nil }
			b.Run("entlock", func(b *testing.B) {
				b.ReportAllocs()
				defer reportCPU(b)()
				for b.Loop() {
					if err := entlock.Transaction(ctx, client, name, noop); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("handwritten", func(b *testing.B) {
				b.ReportAllocs()
				defer reportCPU(b)()
				for b.Loop() {
					if err := handwrittenPG(ctx, db, name); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("ent-no-lock", func(b *testing.B) {
				b.ReportAllocs()
				defer reportCPU(b)()
				for b.Loop() {
					tx, err := plain.Tx(ctx)
					if err != nil {
						b.Fatal(err)
					}
					if err := tx.Commit(); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// handwrittenPG is the PostgreSQL protocol as a careful user would write it
// with database/sql alone: three round trips.
func handwrittenPG(ctx context.Context, db *sql.DB, name string) error {
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
