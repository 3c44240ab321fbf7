package chaos_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/leakcheck"
)

// outcome classifies a verb's result for the reports.
func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ormlock.ErrAlreadyDone):
		return "already_done"
	case errors.Is(err, ormlock.ErrLockLost):
		return "lock_lost"
	case errors.Is(err, ormlock.ErrNotAcquired) && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)):
		return "not_acquired(ctx)"
	case errors.Is(err, ormlock.ErrNotAcquired):
		return "not_acquired"
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return "context"
	}
	return "other"
}

// tally counts outcomes and keeps a few distinct messages of unexpected
// errors; safe for concurrent use.
type tally struct {
	mu     sync.Mutex
	counts map[string]int
	msgs   map[string]int
}

func (c *tally) add(kind string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts, c.msgs = map[string]int{}, map[string]int{}
	}
	c.counts[kind]++
	if last := kind[strings.LastIndexByte(kind, ':')+1:]; last == "other" || last == "context" || last == "lock_lost" {
		msg := err.Error()
		if len(msg) > 160 {
			msg = msg[:160] + "..."
		}
		if _, ok := c.msgs[msg]; ok || len(c.msgs) < 8 {
			c.msgs[msg]++
		}
	}
}

func (c *tally) get(kind string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[kind]
}

func (c *tally) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]string, 0, len(c.counts))
	total := 0
	for k, n := range c.counts {
		keys = append(keys, k)
		total += n
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%d ops:", total)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%d", k, c.counts[k])
	}
	return b.String()
}

func (c *tally) messages() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var lines []string
	for m, n := range c.msgs {
		lines = append(lines, fmt.Sprintf("  %dx %s", n, m))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// TestRestartUnderLoad restarts PostgreSQL, PgBouncer, the PostgreSQL behind
// PgBouncer, and MariaDB while 6 goroutines on 3 pools (three instances)
// loop Transaction, RunOnce and Session on shared keys. Asserted: calls
// return errors, never panic or hang (each has a 3s context); every instance
// does work again after the restart; whenever two calls are inside fn on
// the same key, the earlier one has lost its lock and fails (Session: with
// ErrLockLost); the rows Transaction commits under the lock, each numbered
// by counting the rows before it, are 0..n-1 (no two committed holders
// overlapped); for every RunOnce slot the work rows equal the ledger's done runs (0 or
// 1); no lock left by a dead holder and no connection in use afterwards; no
// goroutine left behind (goleak, after the pools and servers closed).
func TestRestartUnderLoad(t *testing.T) {
	leakcheck.Goroutines(t)
	srvs := testdb.StartAll(t, testdb.PgBouncer, testdb.MariaDB)
	pgb, my := srvs[0], srvs[1]
	type target struct {
		name    string
		srv     *testdb.Server // where the pools connect, and whose leaks are checked
		restart func(testing.TB)
	}
	targets := []target{
		{"postgres", pgb.Backend(), pgb.Backend().Restart},
		{"pgbouncer", pgb, pgb.Restart},
		{"postgres-behind-pgbouncer", pgb, pgb.Backend().Restart},
		{"mariadb", my, my.Restart},
	}
	restarts := pick(1, 3)
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			restartRun(t, tg.srv, tg.restart, restarts)
		})
	}
}

func restartRun(t *testing.T, srv *testdb.Server, restart func(testing.TB), restarts int) {
	k := srv.Kind()
	admin, err := sql.Open(k.Driver(), srv.AdminDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	const instances, workers = 3, 6
	dbs := make([]*gorm.DB, instances)
	sqlDBs := make([]*sql.DB, instances)
	for i := range dbs {
		dbs[i], sqlDBs[i] = openDSN(t, k, srv.DSN())
	}
	work := workTable(t, admin, admin)
	led := ledgerTable(t, dbs[0], admin)
	job := "chaos-restart-" + t.Name()
	txKey, sessKey := "chaos-restart-tx-"+t.Name(), "chaos-restart-session-"+t.Name()
	base := time.Date(2033, 3, 3, 0, 0, 0, 0, time.UTC)

	var (
		txIn, sessIn = new(overlaps), new(overlaps)
		calls        atomic.Int64
		results      tally
		panics       []string
		panicMu      sync.Mutex
		stop         atomic.Bool
		restartedAt  atomic.Int64 // unix nanos of the end of the last restart
		okAfter      = make([]atomic.Int64, instances)
		began        = time.Now()
		wg           sync.WaitGroup
	)
	op := func(w int, rng *rand.Rand) {
		defer func() {
			if r := recover(); r != nil {
				panicMu.Lock()
				panics = append(panics, fmt.Sprintf("worker %d: %v\n%s", w, r, debug.Stack()))
				panicMu.Unlock()
			}
		}()
		inst := w % instances
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		db := dbs[inst].WithContext(ctx)
		startedAt := time.Now().UnixNano()
		id := int(calls.Add(1))
		var err error
		switch p := rng.IntN(100); {
		case p < 45:
			err = gormlock.Transaction(db, txKey, func(tx *gorm.DB) error {
				defer txIn.enter(id)()
				// read-modify-write: the rows committed under the lock
				// are numbered 0, 1, 2, ... only if no two overlapped
				var n int64
				if err := tx.Raw("SELECT COUNT(*) FROM " + work + " WHERE slot = 'tx'").Scan(&n).Error; err != nil {
					return err
				}
				return tx.Exec("INSERT INTO "+work+" (slot, who) VALUES (?, ?)", "tx", fmt.Sprint(n)).Error
			})
			txIn.done(id, err)
		case p < 90:
			slot := base.Add(time.Duration(time.Since(began)/(100*time.Millisecond)) * time.Minute)
			err = gormlock.RunOnce(db, job, slot, func(tx *gorm.DB) error {
				return tx.Exec("INSERT INTO "+work+" (slot, who) VALUES (?, ?)", slot.Format(time.RFC3339), fmt.Sprint(inst)).Error
			}, ormlock.WithLedgerTable(led))
		default:
			err = gormlock.Session(db, sessKey, func(ctx context.Context) error {
				defer sessIn.enter(id)()
				return dbs[inst].WithContext(ctx).Exec("SELECT 1").Error
			}, ormlock.WithKeepalive(500*time.Millisecond))
			sessIn.done(id, err)
		}
		kind := outcome(err)
		results.add(kind, err)
		if kind != "ok" && kind != "already_done" && kind != "not_acquired" {
			// a server that is down refuses at once: back off a little,
			// as a scheduler would, rather than spin
			time.Sleep(2 * time.Millisecond)
		}
		if (kind == "ok" || kind == "already_done") && startedAt > restartedAt.Load() && restartedAt.Load() != 0 {
			okAfter[inst].Add(1)
		}
	}
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for !stop.Load() {
				op(w, rng)
			}
		})
	}
	var restartTook, resumeTook stats
	for r := range restarts {
		time.Sleep(pick(700*time.Millisecond, 3*time.Second))
		before := results.String()
		start := time.Now()
		restart(t)
		restartTook = append(restartTook, time.Since(start))
		for i := range okAfter {
			okAfter[i].Store(0)
		}
		restartedAt.Store(time.Now().UnixNano())
		back := time.Now()
		deadline := back.Add(45 * time.Second)
		for {
			all := true
			for i := range okAfter {
				if okAfter[i].Load() < 3 {
					all = false
				}
			}
			if all {
				break
			}
			if time.Now().After(deadline) {
				stop.Store(true)
				wg.Wait()
				t.Fatalf("restart %d: not every instance did work within 45s of the restart; %s\n%s", r, results.String(), results.messages())
			}
			time.Sleep(5 * time.Millisecond)
		}
		resumeTook = append(resumeTook, time.Since(back))
		t.Logf("restart %d took %v; every instance had 3 successful calls %v after it; before: %s", r, restartTook[r].Round(time.Millisecond), resumeTook[r].Round(time.Millisecond), before)
	}
	time.Sleep(pick(300*time.Millisecond, 3*time.Second))
	stop.Store(true)
	wg.Wait()

	for _, p := range panics {
		t.Errorf("panic: %s", p)
	}
	txIn.check(t, "Transaction", func(err error) bool { return err != nil })
	sessIn.check(t, "Session", func(err error) bool { return errors.Is(err, ormlock.ErrLockLost) })
	// Transaction's committed work is serialised: the rows number 0..n-1
	var txRows, distinct, top int
	num := "CAST(who AS INT)"
	if k.Dialect() == "mysql" {
		num = "CAST(who AS SIGNED)"
	}
	if err := admin.QueryRow("SELECT COUNT(*), COUNT(DISTINCT who), COALESCE(MAX("+num+"), -1) FROM "+work+" WHERE slot = 'tx'").Scan(&txRows, &distinct, &top); err != nil {
		t.Fatal(err)
	}
	if txRows != distinct || top != txRows-1 {
		t.Errorf("Transaction rows: %d committed, %d distinct numbers, highest %d: two holders committed overlapping work", txRows, distinct, top)
	}
	// every slot: work rows == done runs (0 or 1)
	rs, err := gormlock.Runs(dbs[1], job, 100000, ormlock.WithLedgerTable(led))
	if err != nil {
		t.Fatalf("Runs: %v", err)
	}
	done := map[string]bool{}
	for _, r := range rs {
		if r.Status == "done" {
			done[r.Slot.UTC().Format(time.RFC3339)] = true
		}
	}
	q := "SELECT slot, COUNT(*) FROM " + work + " WHERE slot <> 'tx' GROUP BY slot"
	rows, err := admin.Query(q)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			t.Fatal(err)
		}
		seen[s] = n
	}
	rows.Close()
	for s, n := range seen {
		if n != 1 || !done[s] {
			t.Errorf("slot %s: %d work row(s), ledger done=%v; want exactly one committed run", s, n, done[s])
		}
	}
	for s := range done {
		if seen[s] != 1 {
			t.Errorf("slot %s done in the ledger but %d work rows", s, seen[s])
		}
	}
	if results.get("other")+results.get("context")+results.get("lock_lost")+results.get("not_acquired(ctx)") == 0 {
		t.Logf("no call failed during the restart (all were between statements)")
	}
	t.Logf("figure: restart of %s under 6 workers on 3 pools: restarts %v, work resumed on every instance %v after; %s; RunOnce slots done %d; calls inside fn together (the earlier one having lost its lock, as asserted): Transaction %d, Session %d",
		t.Name(), restartTook, resumeTook, results.String(), len(done), txIn.count(), sessIn.count())
	t.Logf("errors seen:\n%s", results.messages())
	srv.AssertNoLeaks(t, sqlDBs...)
}
