package bench_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"slices"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/ormlock/ormlock/bench"
	"github.com/ormlock/ormlock/internal/testdb"
)

// BenchmarkPgBouncerCost shows where a transaction's time goes behind
// PgBouncer (transaction mode), with 8 goroutines each on its own free key
// and a pool of 9 connections, for each adapter and its plain transaction:
// blocks of 100 steps per contender, in rotated order, 6 rounds, and per
// contender, from PgBouncer's SHOW STATS over its blocks, per transaction:
// the queries sent (queries), the time the server spent on them as
// PgBouncer saw it (query-µs), the transaction's time on its server
// connection (xact-µs) and the time clients waited for a server connection
// (wait-µs), and the client's CPU per transaction (cpu-µs, all goroutines
// of the process: the in-process proxy's too over the link). On loopback
// and through the simulated link (-link-delay each way):
//
//	cd bench && go test -run '^$' -bench BenchmarkPgBouncerCost -benchtime 1x .
func BenchmarkPgBouncerCost(b *testing.B) {
	contenders := []string{"gormlock", "gorm-tx", "entlock", "ent-tx", "pgxlock", "pgx-tx", "pgx-hand-written"}
	onNetworks(b, func(b *testing.B, links *bench.Links) {
		tg := sqlTarget(bench.NamePgBouncer, testdb.PgBouncer)
		bt := routed(b, links, tg.make(b))
		admin := pgbouncerAdmin(b)
		const workers = 8
		var names []string
		var attempts [][]bench.Attempt
		for _, c := range bench.Contenders() {
			n := linkContenders[c.Name]
			if !c.On(bt.Dialect) || !slices.Contains(contenders, n) {
				continue
			}
			in := open(b, tg, bt, c, workers+1)
			var ws []bench.Attempt
			for w := range workers {
				ws = append(ws, in.Bind(uniq(fmt.Sprintf("%s-%s-%d", b.Name(), n, w)), func() {}))
			}
			names = append(names, n)
			attempts = append(attempts, ws)
		}
		step, stop := bench.Stepper(context.Background(), names, attempts, workers)
		defer stop()
		type total struct{ xacts, queries, queryUS, xactUS, waitUS, cpu float64 }
		totals := make([]total, len(names))
		const rounds, steps = 6, 100
		for i := range names { // warm-up
			for range 10 {
				if _, err := step(i); err != nil {
					b.Fatal(err)
				}
			}
		}
		for b.Loop() {
			for r := range rounds {
				for j := range names {
					i := (j + r) % len(names)
					before, cpu0 := pgbouncerStats(b, admin), processCPU()
					for range steps {
						if _, err := step(i); err != nil {
							b.Fatalf("%s: %v", names[i], err)
						}
					}
					cpu1, after := processCPU(), pgbouncerStats(b, admin)
					t := &totals[i]
					t.xacts += after[0] - before[0]
					t.queries += after[1] - before[1]
					t.xactUS += after[2] - before[2]
					t.queryUS += after[3] - before[3]
					t.waitUS += after[4] - before[4]
					t.cpu += float64(cpu1-cpu0) / float64(time.Microsecond) / (steps * workers)
				}
			}
		}
		for i, n := range names {
			t := totals[i]
			b.ReportMetric(t.queries/t.xacts, n+"-queries")
			b.ReportMetric(t.queryUS/t.xacts, n+"-query-µs")
			b.ReportMetric(t.xactUS/t.xacts, n+"-xact-µs")
			b.ReportMetric(t.waitUS/t.xacts, n+"-wait-µs")
			b.ReportMetric(t.cpu/float64(rounds*b.N), n+"-cpu-µs")
		}
	})
}

// pgbouncerAdmin opens PgBouncer's admin console (database pgbouncer).
func pgbouncerAdmin(b *testing.B) *sql.DB {
	b.Helper()
	u, err := url.Parse(testdb.DSN(b, testdb.PgBouncer))
	if err != nil {
		b.Fatal(err)
	}
	u.Path = "/pgbouncer"
	db, err := sql.Open("pgx", u.String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	return db
}

// pgbouncerStats returns PgBouncer's totals over every database: the
// transactions, the queries, and the microseconds of transaction, query
// and client wait time.
func pgbouncerStats(b *testing.B, admin *sql.DB) [5]float64 {
	b.Helper()
	rows, err := admin.Query("SHOW STATS")
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var sum [5]float64
	want := map[string]int{"total_xact_count": 0, "total_query_count": 1, "total_xact_time": 2, "total_query_time": 3, "total_wait_time": 4}
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			b.Fatal(err)
		}
		for i, c := range cols {
			if k, ok := want[c]; ok {
				var f float64
				_, _ = fmt.Sscan(fmt.Sprint(vals[i]), &f)
				sum[k] += f
			}
		}
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	return sum
}

// processCPU is the user and system CPU time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
