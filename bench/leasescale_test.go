package bench_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/bench"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/sqllock"
)

// Leases (ormlock.WithLease) measured, docs/BENCHMARKS.md (Leases):
//
//   - TestLeaseScale: ORMLOCK_BENCH_LEASES leases (10,000 in the report)
//     held by one process on a pool of 4 connections, their renewals' write
//     load per second while they are held (statements, rows, WAL or redo
//     bytes), and the time to take and to give them all back;
//   - TestLeaseOpCost: one Session's acquire, renewal and release in round
//     trips (the writes the client flushed, counted by the link it talks
//     through) and WAL or redo bytes, over the link and on loopback, beside
//     an advisory (named) lock's Session.
//
// Counts, not timings, are what they assert or report first: the machine
// is shared, and its timings are noise (the report says so).

var leaseKinds = []testdb.Kind{testdb.Postgres, testdb.PgBouncer, testdb.MariaDB}

// leasePool opens a pool of conns connections to kind k's shared server
// through a link of one-way delay (0: loopback, still counted), and
// migrates the ledger, fence and lease tables of names of its own into it.
func leasePool(t *testing.T, k testdb.Kind, delay time.Duration, conns int) (*sql.DB, *bench.Link, []ormlock.Option, string) {
	t.Helper()
	names := map[testdb.Kind]string{testdb.Postgres: bench.NamePostgres, testdb.PgBouncer: bench.NamePgBouncer, testdb.MariaDB: bench.NameMariaDB}
	bt := sqlTarget(names[k], k).make(t)
	links := bench.NewLinks(delay)
	t.Cleanup(func() { _ = links.Close() })
	rt, err := links.Route(bt)
	if err != nil {
		t.Fatal(err)
	}
	dsn := rt.DSN
	if mode := os.Getenv("ORMLOCK_BENCH_PG_EXEC_MODE"); mode != "" && k == testdb.Postgres {
		// e.g. simple_protocol, as behind PgBouncer: no prepared statement
		// (and so no generic plan) for the renewals
		dsn = testdb.WithParams(dsn, "default_query_exec_mode="+mode)
	}
	db, err := sql.Open(k.Driver(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	ledger := testdb.Table(t, k, "lscale")
	leases := ledger + "_l"
	t.Cleanup(func() { _, _ = testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS " + leases) })
	opts := []ormlock.Option{ormlock.WithLedgerTable(ledger), ormlock.WithLeaseTable(leases)}
	if err := sqllock.Migrate(context.Background(), db, opts...); err != nil {
		t.Fatal(err)
	}
	return db, links.Of(rt), opts, leases
}

// serverWrites is what the server has written so far: WAL bytes
// (PostgreSQL: pg_current_wal_lsn()) or InnoDB redo bytes
// (Innodb_os_log_written) and binlog bytes (Binlog_bytes_written, 0 when
// the binlog is off), and the lease rows' writes (their renewals column,
// summed: one per renewal and per release of a row).
type serverWrites struct {
	wal, binlog, rows int64
}

func readWrites(t *testing.T, k testdb.Kind, leases string) serverWrites {
	t.Helper()
	admin := testdb.AdminDB(t, k)
	var w serverWrites
	if k.Dialect() == "postgres" {
		err := admin.QueryRow(`SELECT (pg_current_wal_lsn() - '0/0')::int8, (SELECT coalesce(sum(renewals), 0)::int8 FROM `+leases+`)`).Scan(&w.wal, &w.rows)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	if err := admin.QueryRow(`SELECT CAST(COALESCE(SUM(renewals), 0) AS SIGNED) FROM ` + leases).Scan(&w.rows); err != nil {
		t.Fatal(err)
	}
	rows, err := admin.Query(`SHOW GLOBAL STATUS WHERE Variable_name IN ('Innodb_os_log_written', 'Binlog_bytes_written')`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name, v string
		if err := rows.Scan(&name, &v); err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		switch strings.ToLower(name) {
		case "innodb_os_log_written":
			w.wal = n
		case "binlog_bytes_written":
			w.binlog = n
		}
	}
	return w
}

func (w serverWrites) minus(o serverWrites) serverWrites {
	return serverWrites{wal: w.wal - o.wal, binlog: w.binlog - o.binlog, rows: w.rows - o.rows}
}

// holdLeases starts n Sessions on distinct keys under opts, each holding
// its lock until stop is called, and returns once all hold. stop makes
// every fn return (the Sessions release on their own live context) and
// returns the first error, a loss while held included.
func holdLeases(t *testing.T, db *sql.DB, prefix string, n int, opts []ormlock.Option) (stop func() error) {
	t.Helper()
	release := make(chan struct{})
	held := make(chan error, n)
	errs := make(chan error, 2*n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			err := sqllock.Session(context.Background(), db, fmt.Sprintf("%s-%d", prefix, i), func(ctx context.Context) error {
				held <- nil
				select {
				case <-release:
				case <-ctx.Done():
					errs <- fmt.Errorf("lease %d lost while held: %w", i, context.Cause(ctx))
				}
				return nil
			}, opts...)
			if err != nil {
				select {
				case <-release:
				default:
					held <- err
				}
				errs <- err
			}
		})
	}
	for range n {
		if err := <-held; err != nil {
			close(release)
			wg.Wait()
			t.Fatalf("holding Session: %v", err)
		}
	}
	return func() error {
		close(release)
		wg.Wait()
		close(errs)
		return <-errs // nil when none
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// TestLeaseScale holds ORMLOCK_BENCH_LEASES leases of one process (TTL
// ORMLOCK_BENCH_LEASE_TTL, 30s by default) on a pool of 4 connections,
// through a link of ORMLOCK_BENCH_LINK one-way delay (0 by default), and
// reports the statements, rows and WAL/redo bytes their renewals cost per
// second over ORMLOCK_BENCH_LEASE_WINDOW (two TTLs by default), and the
// time to take and to release them all.
func TestLeaseScale(t *testing.T) {
	n := envInt("ORMLOCK_BENCH_LEASES", 0)
	if n <= 0 {
		t.Skip("a measurement (internal/conformance checks 2,000 leases on 4 connections): set ORMLOCK_BENCH_LEASES=10000 to run it")
	}
	ttl := envDuration("ORMLOCK_BENCH_LEASE_TTL", 30*time.Second)
	window := envDuration("ORMLOCK_BENCH_LEASE_WINDOW", 2*ttl)
	delay := envDuration("ORMLOCK_BENCH_LINK", 0)
	for _, k := range leaseKinds {
		t.Run(string(k), func(t *testing.T) {
			db, link, opts, leases := leasePool(t, k, delay, 4)
			opts = append(opts, ormlock.WithLease(ttl))
			prefix := uniq("lease-scale")

			w0, s0, t0 := readWrites(t, k, leases), link.Sent(), time.Now()
			stop := holdLeases(t, db, prefix, n, opts)
			took := time.Since(t0)
			w1, s1 := readWrites(t, k, leases), link.Sent()
			acq := w1.minus(w0)
			t.Logf("%s: %d leases taken in %v (%.0f/s): %d statements sent (%.2f per lease), %d WAL/redo bytes (%.0f per lease); pool: %d open, max %d",
				k, n, took.Round(time.Millisecond), float64(n)/took.Seconds(), s1-s0, float64(s1-s0)/float64(n), acq.wal, float64(acq.wal)/float64(n),
				db.Stats().OpenConnections, db.Stats().MaxOpenConnections)

			time.Sleep(window)
			w2, s2 := readWrites(t, k, leases), link.Sent()
			held := w2.minus(w1)
			secs := window.Seconds()
			st := db.Stats()
			t.Logf("%s: %d leases held for %v (TTL %v, renewed every ~%v): %.2f statements/s, %.0f rows renewed/s, %.0f WAL/redo bytes/s, %.0f binlog bytes/s; pool: %d open (max %d), %d in use, %d waits",
				k, n, window, ttl, ttl/3, float64(s2-s1)/secs, float64(held.rows)/secs, float64(held.wal)/secs, float64(held.binlog)/secs,
				st.OpenConnections, st.MaxOpenConnections, st.InUse, st.WaitCount)
			if st.OpenConnections > 4 {
				t.Errorf("%d connections open, want at most 4", st.OpenConnections)
			}

			t3 := time.Now()
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			rel := time.Since(t3)
			w4, s4 := readWrites(t, k, leases), link.Sent()
			r := w4.minus(w2)
			t.Logf("%s: %d leases released in %v: %d statements sent (%.2f per lease), %d WAL/redo bytes (%.0f per lease)",
				k, n, rel.Round(time.Millisecond), s4-s2, float64(s4-s2)/float64(n), r.wal, float64(r.wal)/float64(n))
		})
	}
}

// TestLeaseOpCost: round trips and WAL/redo bytes of one Session's
// acquire, renewal and release under a lease, beside an advisory (named)
// lock's Session, on loopback and through a link of ORMLOCK_BENCH_LINK
// (250µs by default) one-way delay; ORMLOCK_BENCH_LEASE_OPS Sessions each
// (200 by default).
func TestLeaseOpCost(t *testing.T) {
	if os.Getenv("ORMLOCK_BENCH_LEASE_OPS") == "" {
		t.Skip("a measurement: set ORMLOCK_BENCH_LEASE_OPS=200 to run it")
	}
	ops := envInt("ORMLOCK_BENCH_LEASE_OPS", 200)
	link := envDuration("ORMLOCK_BENCH_LINK", 250*time.Microsecond)
	for _, k := range leaseKinds {
		for _, delay := range []time.Duration{0, link} {
			t.Run(fmt.Sprintf("%s/link=%v", k, delay), func(t *testing.T) {
				db, l, opts, leases := leasePool(t, k, delay, 4)
				for _, m := range []struct {
					name string
					opts []ormlock.Option
				}{
					{"advisory", nil},
					{"lease", []ormlock.Option{ormlock.WithLease(30 * time.Second)}},
				} {
					o := append(append([]ormlock.Option(nil), opts...), m.opts...)
					key := uniq("lease-op-" + m.name)
					var inFn int64
					fn := func(context.Context) error { inFn = l.Sent(); return nil }
					if err := sqllock.Session(context.Background(), db, key, fn, o...); err != nil { // warm
						t.Fatal(err)
					}
					var acq, rel int64
					w0, t0 := readWrites(t, k, leases), time.Now()
					for range ops {
						s0 := l.Sent()
						if err := sqllock.Session(context.Background(), db, key, fn, o...); err != nil {
							t.Fatal(err)
						}
						acq += inFn - s0
						rel += l.Sent() - inFn
					}
					el := time.Since(t0)
					w := readWrites(t, k, leases).minus(w0)
					t.Logf("%s %s, link %v: Session %.0f µs: acquire %.2f round trips, release %.2f; %.0f WAL/redo bytes, %.0f binlog bytes per Session",
						k, m.name, delay, float64(el.Microseconds())/float64(ops), float64(acq)/float64(ops), float64(rel)/float64(ops),
						float64(w.wal)/float64(ops), float64(w.binlog)/float64(ops))
				}
				// renewals: one lease, then 1,000, held for 3.5 intervals
				// of a 3s TTL (a renewal every ~1s)
				for _, n := range []int{1, 1000} {
					o := append(append([]ormlock.Option(nil), opts...), ormlock.WithLease(3*time.Second))
					stop := holdLeases(t, db, uniq(fmt.Sprintf("lease-renew-%d", n)), n, o)
					w0, s0 := readWrites(t, k, leases), l.Sent()
					time.Sleep(3500 * time.Millisecond)
					w, s := readWrites(t, k, leases).minus(w0), l.Sent()-s0
					if err := stop(); err != nil {
						t.Fatal(err)
					}
					t.Logf("%s renewals of %d leases, link %v: %.2f statements/s, %.0f rows/s, %.0f WAL/redo bytes/s (%.0f per row renewed)",
						k, n, delay, float64(s)/3.5, float64(w.rows)/3.5, float64(w.wal)/3.5, float64(w.wal)/float64(max(w.rows, 1)))
				}
			})
		}
	}
}
