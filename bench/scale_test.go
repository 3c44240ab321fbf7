package bench_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/gormtest"
	"github.com/ormlock/ormlock/keyhash"
)

// The cost of the verbs as users' data grows: a big ledger, a big fence
// table, many distinct keys, many locks held elsewhere. These tests are
// measurements, not part of make test: they run only with ORMLOCK_SCALE=1,
// print "figure:" lines, and fail only when a verb fails. See
// docs/BENCHMARKS.md, At scale.
//
//	cd bench && ORMLOCK_SCALE=1 go test -count=1 -timeout 60m -v -run 'TestScale' .
//
// ORMLOCK_SCALE_ROWS sets the big ledger's rows (default 1,000,000; the
// fence table's rows are the same), ORMLOCK_SCALE_PRUNE_ROWS how many of
// them TestScaleLedger prunes (default a quarter), ORMLOCK_SCALE_KEYS the
// distinct keys of TestScaleKeys (default 100,000).

func scaleOn(t *testing.T) {
	t.Helper()
	if os.Getenv("ORMLOCK_SCALE") == "" {
		t.Skip("a measurement, not a test: run with ORMLOCK_SCALE=1 (docs/BENCHMARKS.md, At scale)")
	}
}

func scaleInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// scaleKinds are the servers of the scale tests: PgBouncer runs the same
// PostgreSQL's plans.
var scaleKinds = []testdb.Kind{testdb.Postgres, testdb.MariaDB}

// eachScaleServer runs f on every server of scaleKinds with GORM on a pool
// of 4 connections, when ORMLOCK_SCALE is set.
func eachScaleServer(t *testing.T, f func(t *testing.T, k testdb.Kind, gdb *gorm.DB, sdb *sql.DB)) {
	scaleOn(t)
	for _, k := range scaleKinds {
		t.Run(string(k), func(t *testing.T) {
			gdb, sdb := scaleGorm(t, k, 4)
			f(t, k, gdb, sdb)
		})
	}
}

// bulkLoad runs stmt(lo, hi), an INSERT ... SELECT of rows lo to hi, for
// each million of rows rows.
func bulkLoad(t *testing.T, db *sql.DB, rows int, stmt func(lo, hi int) string) {
	t.Helper()
	for lo := 0; lo < rows; lo += 1_000_000 {
		hi := min(rows, lo+1_000_000) - 1
		if _, err := db.Exec(stmt(lo, hi)); err != nil {
			t.Fatalf("load rows %d-%d: %v", lo, hi, err)
		}
	}
}

// scaleGorm opens GORM on k's server with a pool of conns.
func scaleGorm(t *testing.T, k testdb.Kind, conns int) (*gorm.DB, *sql.DB) {
	t.Helper()
	sdb := testdb.Open(t, k)
	sdb.SetMaxOpenConns(conns)
	sdb.SetMaxIdleConns(conns)
	return gormtest.On(t, k.Dialect(), sdb), sdb
}

// scaleTable returns a fresh ledger table name for the test (its fence
// table is the name with _fence) and creates both with gormlock.Migrate.
func scaleTable(t *testing.T, gdb *gorm.DB, tag string) string {
	t.Helper()
	name := fmt.Sprintf("scale_%s_%x", tag, time.Now().UnixNano()&0xffffffff)
	if err := gormlock.Migrate(gdb, ormlock.WithLedgerTable(name)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, n := range []string{name, name + "_fence"} {
			_ = gdb.Exec("DROP TABLE IF EXISTS " + n).Error
		}
	})
	return name
}

// Ledger layout of the scale tests: scaleJobs jobs in two namespaces (the
// empty one and 'tenant'), one slot an hour from scaleEpoch, every status (mostly
// 'done', 1 in 97 'failed', 1 in 1009 'running'). 1,000,000 rows are 1,000
// hours of slots per job; 10,000,000 rows, 10,000 hours (a year and two
// months).
const scaleJobs = 500

var scaleEpoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// loadLedger bulk-loads rows rows into the ledger table with one INSERT ...
// SELECT per million rows, then ANALYZEs it, and returns the time taken.
func loadLedger(t *testing.T, db *sql.DB, k testdb.Kind, table string, rows int) time.Duration {
	t.Helper()
	start := time.Now()
	per := 2 * scaleJobs
	bulkLoad(t, db, rows, func(lo, hi int) string {
		if k == testdb.MariaDB {
			return fmt.Sprintf("INSERT INTO `%s` (namespace, job, slot, status, owner, started_at, finished_at, error)"+`
SELECT IF(seq %% 2 = 0, '', 'tenant'), CONCAT('job-', (seq DIV 2) %% %d),
	TIMESTAMP'2025-01-01 00:00:00' + INTERVAL (seq DIV %d) HOUR,
	CASE WHEN seq %% 1009 = 0 THEN 'running' WHEN seq %% 97 = 0 THEN 'failed' ELSE 'done' END,
	CONCAT('host-', seq %% 7, '/', 1000 + seq %% 13),
	TIMESTAMP'2025-01-01 00:00:01' + INTERVAL (seq DIV %d) HOUR,
	IF(seq %% 1009 = 0, NULL, TIMESTAMP'2025-01-01 00:00:09' + INTERVAL (seq DIV %d) HOUR),
	IF(seq %% 97 = 0 AND seq %% 1009 <> 0, 'exit status 1: connection refused', NULL)
FROM seq_%d_to_%d`, table, scaleJobs, per, per, per, lo, hi)
		}
		return fmt.Sprintf(`INSERT INTO %q (namespace, job, slot, status, owner, started_at, finished_at, error)
SELECT CASE WHEN g %% 2 = 0 THEN '' ELSE 'tenant' END, 'job-' || (g / 2) %% %d,
	timestamptz '2025-01-01 00:00:00+00' + (g / %d) * interval '1 hour',
	CASE WHEN g %% 1009 = 0 THEN 'running' WHEN g %% 97 = 0 THEN 'failed' ELSE 'done' END,
	'host-' || g %% 7 || '/' || 1000 + g %% 13,
	timestamptz '2025-01-01 00:00:01+00' + (g / %d) * interval '1 hour',
	CASE WHEN g %% 1009 = 0 THEN NULL ELSE timestamptz '2025-01-01 00:00:09+00' + (g / %d) * interval '1 hour' END,
	CASE WHEN g %% 97 = 0 AND g %% 1009 <> 0 THEN 'exit status 1: connection refused' END
FROM generate_series(%d, %d) AS g`, table, scaleJobs, per, per, per, lo, hi)
	})
	analyze(t, db, k, table)
	return time.Since(start)
}

func analyze(t *testing.T, db *sql.DB, k testdb.Kind, table string) {
	t.Helper()
	q := fmt.Sprintf("ANALYZE %q", table)
	if k == testdb.MariaDB {
		q = "ANALYZE TABLE `" + table + "`"
	}
	if _, err := db.Exec(q); err != nil {
		t.Fatal(err)
	}
}

// interleave runs rounds × each of fns in a rotated order and returns each
// one's sorted latencies.
func interleave(t *testing.T, rounds int, fns ...func(i int) error) [][]time.Duration {
	t.Helper()
	lat := make([][]time.Duration, len(fns))
	for r := range rounds {
		for j := range fns {
			i := (j + r) % len(fns)
			t0 := time.Now()
			if err := fns[i](r); err != nil {
				t.Fatalf("contender %d, round %d: %v", i, r, err)
			}
			lat[i] = append(lat[i], time.Since(t0))
		}
	}
	for i := range lat {
		slices.Sort(lat[i])
	}
	return lat
}

func pct(sorted []time.Duration, f float64) time.Duration {
	return sorted[int(f*float64(len(sorted)-1))].Round(time.Microsecond)
}

func ratio(a, b []time.Duration) float64 { return float64(pct(a, 0.5)) / float64(pct(b, 0.5)) }

// TestScaleLedger: RunOnce (a new slot: the claim's INSERT) and the same on
// a slot already done (what RunScheduled costs every instance that is not
// first) on an empty ledger and on a ledger of ORMLOCK_SCALE_ROWS rows,
// interleaved; Runs(job, 50) on the big ledger and on one of 100,000 rows of
// the same layout, interleaved; then Prune of the oldest rows of the big
// ledger's empty namespace (ORMLOCK_SCALE_PRUNE_ROWS, by default a quarter
// of the ledger) while RunOnce keeps running, against RunOnce without it;
// a Prune that finds nothing, on both ledgers, interleaved; and Migrate
// adding the index on (namespace, slot) to the big ledger once it is
// dropped (a ledger of the shape before that index).
func TestScaleLedger(t *testing.T) {
	rows := scaleInt("ORMLOCK_SCALE_ROWS", 1_000_000)
	eachScaleServer(t, func(t *testing.T, k testdb.Kind, gdb *gorm.DB, sdb *sql.DB) {
		empty, small, big := scaleTable(t, gdb, "empty"), scaleTable(t, gdb, "small"), scaleTable(t, gdb, "big")
		loadLedger(t, sdb, k, small, 100_000)
		took := loadLedger(t, sdb, k, big, rows)
		t.Logf("figure: %s: loaded %d ledger rows in %v (%.0f rows/s)", k, rows, took.Round(time.Second), float64(rows)/took.Seconds())

		const job = "job-7"
		// new slots after every loaded one
		next := scaleEpoch.Add(time.Duration(rows/(2*scaleJobs)+10) * time.Hour)
		fn := func(*gorm.DB) error { return nil }
		runOnce := func(table string) func(int) error {
			return func(i int) error {
				return gormlock.RunOnce(gdb, job, next.Add(time.Duration(i)*time.Minute), fn, ormlock.WithLedgerTable(table))
			}
		}
		// the slot done: in the empty ledger, one run first; in the
		// big one, a loaded 'done' row (job-7 at hour 0 is row 14).
		doneSlot := scaleEpoch
		if err := gormlock.RunOnce(gdb, job, doneSlot, fn, ormlock.WithLedgerTable(empty)); err != nil {
			t.Fatal(err)
		}
		alreadyDone := func(table string) func(int) error {
			return func(int) error {
				err := gormlock.RunOnce(gdb, job, doneSlot, fn, ormlock.WithLedgerTable(table))
				if errors.Is(err, ormlock.ErrAlreadyDone) {
					return nil
				}
				return fmt.Errorf("want ErrAlreadyDone, got %v", err)
			}
		}
		lat := interleave(t, 1500, runOnce(empty), runOnce(big), alreadyDone(empty), alreadyDone(big))
		t.Logf("figure: %s: RunOnce (new slot) p50 %v on the empty ledger, %v on %d rows: %.2fx (p99 %v, %v)",
			k, pct(lat[0], .5), pct(lat[1], .5), rows, ratio(lat[1], lat[0]), pct(lat[0], .99), pct(lat[1], .99))
		t.Logf("figure: %s: RunOnce on a done slot (RunScheduled after the first instance) p50 %v empty, %v on %d rows: %.2fx",
			k, pct(lat[2], .5), pct(lat[3], .5), rows, ratio(lat[3], lat[2]))

		runs := func(table string) func(int) error {
			return func(int) error {
				rs, err := gormlock.Runs(gdb, job, 50, ormlock.WithLedgerTable(table))
				if err == nil && len(rs) != 50 {
					err = fmt.Errorf("Runs: %d rows", len(rs))
				}
				return err
			}
		}
		lat = interleave(t, 1500, runs(small), runs(big))
		t.Logf("figure: %s: Runs(job, 50) p50 %v on 100,000 rows, %v on %d rows: %.2fx",
			k, pct(lat[0], .5), pct(lat[1], .5), rows, ratio(lat[1], lat[0]))

		// Prune the empty namespace's oldest ORMLOCK_SCALE_PRUNE_ROWS
		// rows (default a quarter of the ledger: half of the namespace)
		// during RunOnce; the namespace has scaleJobs rows an hour.
		pruneRows := scaleInt("ORMLOCK_SCALE_PRUNE_ROWS", rows/4)
		cut := scaleEpoch.Add(time.Duration(pruneRows/scaleJobs) * time.Hour)
		olderThan := time.Since(cut)
		base := next.Add(30 * 24 * time.Hour) // after the 1,500 minutes of the interleaved runs
		var (
			during []time.Duration
			pruned int64
			perr   error
			ptook  time.Duration
			wg     sync.WaitGroup
		)
		done := make(chan struct{})
		wg.Go(func() {
			defer close(done)
			t0 := time.Now()
			pruned, perr = gormlock.Prune(gdb, olderThan, ormlock.WithLedgerTable(big))
			ptook = time.Since(t0)
		})
		for i := 0; ; i++ {
			select {
			case <-done:
			default:
				t0 := time.Now()
				if err := gormlock.RunOnce(gdb, job, base.Add(time.Duration(i)*time.Minute), fn, ormlock.WithLedgerTable(big)); err != nil {
					t.Fatal(err)
				}
				during = append(during, time.Since(t0))
				continue
			}
			break
		}
		wg.Wait()
		if perr != nil {
			t.Fatal(perr)
		}
		base = base.Add(time.Duration(len(during)+10) * time.Minute)
		var without []time.Duration
		for i := range max(len(during), 500) {
			t0 := time.Now()
			if err := gormlock.RunOnce(gdb, job, base.Add(time.Duration(i)*time.Minute), fn, ormlock.WithLedgerTable(big)); err != nil {
				t.Fatal(err)
			}
			without = append(without, time.Since(t0))
		}
		slices.Sort(during)
		slices.Sort(without)
		if len(during) == 0 {
			during = []time.Duration{0}
		}
		t.Logf("figure: %s: Prune of %d rows of %d in %v (%.0f rows/s, batches of %d); RunOnce during it: %d runs, p50 %v p99 %v; after it: p50 %v p99 %v",
			k, pruned, rows, ptook.Round(time.Millisecond), float64(pruned)/ptook.Seconds(), 1000, len(during),
			pct(during, .5), pct(during, .99), pct(without, .5), pct(without, .99))

		batches := max(1, (pruned+999)/1000)
		t.Logf("figure: %s: Prune per batch of 1,000: %v (%d batches)", k, (ptook / time.Duration(batches)).Round(time.Microsecond), batches)

		// A Prune that finds nothing to delete (a cutoff before every
		// slot: what a daily Prune costs once it has caught up), on the
		// 100,000-row ledger and the big one, interleaved.
		nothing := func(table string) func(int) error {
			return func(int) error {
				n, err := gormlock.Prune(gdb, time.Since(scaleEpoch.Add(-time.Hour)), ormlock.WithLedgerTable(table))
				if err == nil && n != 0 {
					err = fmt.Errorf("Prune deleted %d rows", n)
				}
				return err
			}
		}
		lat = interleave(t, 300, nothing(small), nothing(big))
		t.Logf("figure: %s: Prune finding nothing (one batch) p50 %v on 100,000 rows, %v on %d rows: %.2fx",
			k, pct(lat[0], .5), pct(lat[1], .5), rows, ratio(lat[1], lat[0]))

		// What the first Migrate after upgrading costs on a big ledger of
		// the previous shape: drop the index, Migrate adds it back.
		drop := "DROP INDEX " + fmt.Sprintf("%q", big+"_ns_slot")
		if k == testdb.MariaDB {
			drop = "ALTER TABLE `" + big + "` DROP INDEX `" + big + "_ns_slot`"
		}
		if _, err := sdb.Exec(drop); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		if err := gormlock.Migrate(gdb, ormlock.WithLedgerTable(big)); err != nil {
			t.Fatal(err)
		}
		t.Logf("figure: %s: Migrate adds the index on (namespace, slot) to the ledger of %d rows in %v",
			k, rows-int(pruned), time.Since(t0).Round(time.Millisecond))
		t0 = time.Now()
		if err := gormlock.Migrate(gdb, ormlock.WithLedgerTable(big)); err != nil {
			t.Fatal(err)
		}
		t.Logf("figure: %s: Migrate again (the index there): %v", k, time.Since(t0).Round(time.Microsecond))
	})
}

// TestScaleFence: a fencing token (gormlock.Transaction WithFencing on one
// key, so the token row is updated) with an empty fence table and with one
// of ORMLOCK_SCALE_ROWS rows, interleaved.
func TestScaleFence(t *testing.T) {
	rows := scaleInt("ORMLOCK_SCALE_ROWS", 1_000_000)
	eachScaleServer(t, func(t *testing.T, k testdb.Kind, gdb *gorm.DB, sdb *sql.DB) {
		empty, big := scaleTable(t, gdb, "fempty"), scaleTable(t, gdb, "fbig")
		start := time.Now()
		bulkLoad(t, sdb, rows, func(lo, hi int) string {
			if k == testdb.MariaDB {
				return fmt.Sprintf("INSERT INTO `%s` (namespace, lock_key, token) SELECT IF(seq %% 2 = 0, '', 'tenant'), CONCAT('customer:', seq), 1 + seq %% 50 FROM seq_%d_to_%d", big+"_fence", lo, hi)
			}
			return fmt.Sprintf(`INSERT INTO %q (namespace, lock_key, token) SELECT CASE WHEN g %% 2 = 0 THEN '' ELSE 'tenant' END, 'customer:' || g, 1 + g %% 50 FROM generate_series(%d, %d) AS g`, big+"_fence", lo, hi)
		})
		analyze(t, sdb, k, big+"_fence")
		t.Logf("figure: %s: loaded %d fence rows in %v", k, rows, time.Since(start).Round(time.Second))
		fenced := func(table string) func(int) error {
			return func(int) error {
				return gormlock.Transaction(gdb, "customer:scale-fenced", func(tx *gorm.DB) error {
					if _, ok := gormlock.FencingToken(tx); !ok {
						return errors.New("no token")
					}
					return nil
				}, ormlock.WithFencing(), ormlock.WithLedgerTable(table))
			}
		}
		newKey := func(table string) func(int) error {
			return func(i int) error {
				return gormlock.Transaction(gdb, fmt.Sprintf("customer:new-%s-%d", table, i), func(*gorm.DB) error { return nil },
					ormlock.WithFencing(), ormlock.WithLedgerTable(table))
			}
		}
		lat := interleave(t, 1500, fenced(empty), fenced(big), newKey(empty), newKey(big))
		t.Logf("figure: %s: fenced Transaction, same key, p50 %v with an empty fence table, %v with %d rows: %.2fx",
			k, pct(lat[0], .5), pct(lat[1], .5), rows, ratio(lat[1], lat[0]))
		t.Logf("figure: %s: fenced Transaction, a new key each time, p50 %v empty, %v with %d rows: %.2fx",
			k, pct(lat[2], .5), pct(lat[3], .5), rows, ratio(lat[3], lat[2]))
	})
}

// TestScaleKeys: ORMLOCK_SCALE_KEYS distinct keys through
// gormlock.Transaction in one process; the live heap (after a GC) at each
// tenth, after a warm-up of 5% of the keys.
func TestScaleKeys(t *testing.T) {
	n := scaleInt("ORMLOCK_SCALE_KEYS", 100_000)
	eachScaleServer(t, func(t *testing.T, k testdb.Kind, gdb *gorm.DB, sdb *sql.DB) {
		fn := func(*gorm.DB) error { return nil }
		heap := func() (uint64, uint64) {
			runtime.GC()
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			return m.HeapAlloc, m.HeapObjects
		}
		warm := n / 20
		var samples []string
		var first, last uint64
		var firstObj, lastObj uint64
		start := time.Now()
		for i := range n {
			if err := gormlock.Transaction(gdb, fmt.Sprintf("tenant-%d:invoice", i), fn); err != nil {
				t.Fatal(err)
			}
			if i+1 == warm || (i+1)%(n/10) == 0 {
				h, o := heap()
				if i+1 == warm {
					first, firstObj = h, o
				}
				last, lastObj = h, o
				samples = append(samples, fmt.Sprintf("%d: %.2f MB", i+1, float64(h)/1e6))
			}
		}
		t.Logf("figure: %s: %d distinct keys through gormlock.Transaction in %v; live heap after warm-up (%d keys) %.2f MB, %d objects; after %d keys %.2f MB, %d objects: %+.1f bytes per key after warm-up",
			k, n, time.Since(start).Round(time.Second), warm, float64(first)/1e6, firstObj, n, float64(last)/1e6, lastObj,
			(float64(last)-float64(first))/float64(n-warm))
		t.Logf("figure: %s: live heap by keys done: %v", k, samples)
	})
}

// TestScaleHolder: gormlock.Holder on a key held by another session that
// holds 10 locks in all, and 5,000, alternating in rounds.
func TestScaleHolder(t *testing.T) {
	const many = 5000
	eachScaleServer(t, func(t *testing.T, k testdb.Kind, gdb *gorm.DB, sdb *sql.DB) {
		ctx := context.Background()
		other, err := sdb.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		const key = "scale-holder"
		var take, drop string
		if k == testdb.MariaDB {
			take = "SELECT COUNT(GET_LOCK(CONCAT('scale-other-', seq), 0)) FROM seq_1_to_%d"
			drop = "SELECT RELEASE_ALL_LOCKS()"
			if _, err := other.ExecContext(ctx, "DO GET_LOCK(?, 0)", keyhash.MySQLName("", key)); err != nil {
				t.Fatal(err)
			}
		} else {
			take = "SELECT count(pg_advisory_lock(-g)) FROM generate_series(1, %d) AS g"
			drop = "SELECT pg_advisory_unlock_all()"
			if _, err := other.ExecContext(ctx, "SELECT pg_advisory_lock($1)", keyhash.Int64(key)); err != nil {
				t.Fatal(err)
			}
		}
		hold := func(n int) {
			t.Helper()
			if _, err := other.ExecContext(ctx, drop); err != nil {
				t.Fatal(err)
			}
			var err error
			if k == testdb.MariaDB {
				_, err = other.ExecContext(ctx, "DO GET_LOCK(?, 0)", keyhash.MySQLName("", key))
			} else {
				_, err = other.ExecContext(ctx, "SELECT pg_advisory_lock($1)", keyhash.Int64(key))
			}
			if err == nil {
				_, err = other.ExecContext(ctx, fmt.Sprintf(take, n-1))
			}
			if err != nil {
				t.Fatalf("hold %d locks: %v", n, err)
			}
		}
		lookup := func() error {
			h, err := gormlock.Holder(gdb, key)
			if err == nil && !h.Held {
				err = errors.New("Holder: not held")
			}
			return err
		}
		var lat [2][]time.Duration
		for r := range 20 {
			for j := range 2 {
				i := (j + r) % 2
				hold([]int{10, many}[i])
				for range 50 {
					t0 := time.Now()
					if err := lookup(); err != nil {
						t.Fatal(err)
					}
					lat[i] = append(lat[i], time.Since(t0))
				}
			}
		}
		if _, err := other.ExecContext(ctx, drop); err != nil {
			t.Fatal(err)
		}
		slices.Sort(lat[0])
		slices.Sort(lat[1])
		t.Logf("figure: %s: Holder with 10 locks held p50 %v (p99 %v), with %d held p50 %v (p99 %v): %.2fx",
			k, pct(lat[0], .5), pct(lat[0], .99), many, pct(lat[1], .5), pct(lat[1], .99), ratio(lat[1], lat[0]))
	})
}
