package chaos_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"go/build"
	"io"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/leakcheck"
)

// A holder dies while it holds a lock: its process is killed with SIGKILL
// (TestKillHolder), or its server connection is ended while fn runs
// (TestKillConnectionMidFn).

// buildHolder builds cmd/holder into dir and returns the binary's path.
func buildHolder(t *testing.T, dir string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(build.Default.GOROOT, "bin", "go")
	}
	bin := filepath.Join(dir, "holder")
	start := time.Now()
	out, err := exec.Command(goBin, "build", "-o", bin, "./cmd/holder").CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./cmd/holder: %v\n%s", err, out)
	}
	t.Logf("built cmd/holder in %v", time.Since(start).Round(time.Millisecond))
	return bin
}

// holderProc is a running cmd/holder.
type holderProc struct {
	cmd    *exec.Cmd
	stderr *strings.Builder
}

// startHolder runs the holder binary with args and waits up to 60s until it
// prints "holding". The process gets SIGKILL if the test binary dies, and at
// cleanup if it still runs.
func startHolder(t *testing.T, bin string, args ...string) *holderProc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	h := &holderProc{cmd: cmd, stderr: new(strings.Builder)}
	cmd.Stderr = h.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start holder: %v", err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "holding" {
				ready <- nil
				_, _ = io.Copy(io.Discard, stdout)
				return
			}
		}
		ready <- fmt.Errorf("holder exited before holding (stdout: %v)", sc.Err())
	}()
	select {
	case err := <-ready:
		if err != nil {
			_ = cmd.Wait()
			t.Fatalf("%v; stderr: %s", err, h.stderr)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("holder did not print holding within 60s; stderr: %s", h.stderr)
	}
	return h
}

// killHard sends SIGKILL and reaps the process, checking that it died of it.
func (h *holderProc) killHard(t *testing.T) {
	t.Helper()
	if err := h.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 holder: %v", err)
	}
	err := h.cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("holder exit: %v, want death by SIGKILL; stderr: %s", err, h.stderr)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("holder exit: %v, want death by SIGKILL; stderr: %s", err, h.stderr)
	}
}

// TestKillHolder kills -9 a process that holds a lock (cmd/holder, inside
// gormlock.Transaction, Session or RunOnce, after writing a row inside fn)
// and measures the time from the kill until another instance, polling with
// try-once, acquires the lock. The database frees the lock when it sees the
// client's socket close: there is no lease to expire. The dead holder's row
// is never committed; under RunOnce the next instance runs the slot and the
// ledger shows exactly one run.
func TestKillHolder(t *testing.T) {
	bin := buildHolder(t, t.TempDir())
	rounds := pick(3, 20)
	bound := 15 * time.Second // generous: the machine is shared and loaded
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, sqlDB := openGorm(t, k)
		admin := testdb.AdminDB(t, k)
		dsn := testdb.DSN(t, k)
		work := workTable(t, sqlDB, admin)
		led := ledgerTable(t, db, admin)
		for _, verb := range []string{"transaction", "session", "runonce"} {
			t.Run(verb, func(t *testing.T) {
				var took stats
				for i := range rounds {
					key := fmt.Sprintf("chaos-kill9-%s-%s-%d", k, verb, i)
					slot := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Hour)
					slotText := slot.Format(time.RFC3339Nano)
					lock := named(key)
					if verb == "runonce" {
						lock = lockName{key: ormlock.RunKey(key, slot)}
					}
					args := []string{"-dialect", k.Dialect(), "-dsn", dsn, "-verb", verb,
						"-key", key, "-job", key, "-slot", slotText, "-ledger", led}
					if verb != "session" {
						// a Session's fn writes through the pool, outside
						// any transaction: its rows are not rolled back
						args = append(args, "-table", work)
					}
					h := startHolder(t, bin, args...)
					mustHeld(t, k.Dialect(), admin, lock)

					try := func() error {
						switch verb {
						case "transaction":
							return gormlock.Transaction(db, key, func(tx *gorm.DB) error { return nil })
						case "session":
							return gormlock.Session(db, key, func(ctx context.Context) error { return nil })
						default:
							return gormlock.RunOnce(db, key, slot, func(tx *gorm.DB) error {
								return tx.Exec("INSERT INTO "+work+" (slot, who) VALUES (?, ?)", slotText, "survivor").Error
							}, ormlock.WithLedgerTable(led))
						}
					}
					if err := try(); !errors.Is(err, ormlock.ErrNotAcquired) {
						t.Fatalf("round %d: while the holder lives: %v, want ErrNotAcquired", i, err)
					}

					start := time.Now()
					h.killHard(t)
					var polls int
					for {
						polls++
						err := try()
						if err == nil {
							break
						}
						if !errors.Is(err, ormlock.ErrNotAcquired) {
							t.Fatalf("round %d: after the kill: %v", i, err)
						}
						if time.Since(start) > bound {
							t.Fatalf("round %d: lock of the killed holder not free after %v", i, bound)
						}
						time.Sleep(time.Millisecond)
					}
					d := time.Since(start)
					took = append(took, d)

					if n := countRows(t, k.Dialect(), admin, work, "slot = ? AND who LIKE 'holder/%'", slotText); n != 0 {
						t.Errorf("round %d: %d row(s) of the killed holder committed", i, n)
					}
					if verb == "runonce" {
						rs, err := gormlock.Runs(db, key, 10, ormlock.WithLedgerTable(led))
						if err != nil {
							t.Fatal(err)
						}
						if len(rs) != 1 || rs[0].Status != "done" {
							t.Errorf("round %d: ledger %+v, want exactly one done run", i, rs)
						}
						if n := countRows(t, k.Dialect(), admin, work, "slot = ?", slotText); n != 1 {
							t.Errorf("round %d: %d work rows for the slot, want 1", i, n)
						}
						if err := try(); !errors.Is(err, ormlock.ErrAlreadyDone) {
							t.Errorf("round %d: RunOnce again: %v, want ErrAlreadyDone", i, err)
						}
					}
					t.Logf("round %d: acquired %v after kill -9 (%d try-once polls)", i, d.Round(10*time.Microsecond), polls)
				}
				t.Logf("figure: kill -9 %s holder on %s -> acquired by another instance: %v", verb, k, took)
			})
		}
	})
}

// killMidFn runs call (which calls fn of a verb holding lock) on a
// goroutine; once fn has signalled, through the started channel, that it is
// inside, the holder's server connection is ended from admin
// (pg_terminate_backend or KILL CONNECTION), and killed is closed for fn.
// It returns the time from the kill until call returned, and call's error.
func killMidFn(t *testing.T, dialect string, admin *sql.DB, lock lockName,
	call func(started chan<- struct{}, killed <-chan struct{}) error) (time.Duration, error) {
	t.Helper()
	started := make(chan struct{})
	killed := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- call(started, killed) }()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("the verb returned before fn started: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("fn did not start within 30s")
	}
	id := waitHolder(t, dialect, admin, lock)
	testdb.KillOn(t, dialect, admin, id)
	at := time.Now()
	close(killed)
	select {
	case err := <-done:
		return time.Since(at), err
	case <-time.After(60 * time.Second):
		t.Fatal("the verb did not return within 60s of the kill")
		return 0, nil
	}
}

// TestKillConnectionMidFn ends the holder's server connection while fn runs
// (pg_terminate_backend, KILL CONNECTION; behind PgBouncer, the PostgreSQL
// backend) and checks what each verb promises:
//
//   - Transaction: fn's next statement fails, the verb returns an error, and
//     nothing fn wrote is committed; another instance acquires at once.
//   - Session: fn's context is cancelled with cause ErrLockLost and Session
//     returns an error wrapping it.
//   - RunOnce (transactional and claim mode): the killed run leaves no 'done'
//     row; the retry by another instance runs; a third call finds the slot
//     done; the ledger shows exactly one done run.
func TestKillConnectionMidFn(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		d := k.Dialect()
		admin := testdb.AdminDB(t, k)
		dbA, sqlA := openGorm(t, k)
		dbB, _ := openGorm(t, k)
		work := workTable(t, sqlA, admin)
		led := ledgerTable(t, dbA, admin)
		insert := func(tx *gorm.DB, slot, who string) error {
			return tx.Exec("INSERT INTO "+work+" (slot, who) VALUES (?, ?)", slot, who).Error
		}

		rounds := pick(1, 10)
		t.Run("transaction", func(t *testing.T) {
			var took stats
			for i := range rounds {
				key := fmt.Sprintf("chaos-midfn-tx-%s-%d", k, i)
				dt, err := killMidFn(t, d, admin, named(key), func(started chan<- struct{}, killed <-chan struct{}) error {
					return gormlock.Transaction(dbA, key, func(tx *gorm.DB) error {
						if err := insert(tx, key, "first"); err != nil {
							return err
						}
						close(started)
						<-killed
						return insert(tx, key, "second")
					})
				})
				took = append(took, dt)
				t.Logf("round %d: returned %v after the kill: %v", i, dt.Round(time.Millisecond), err)
				if err == nil || errors.Is(err, ormlock.ErrNotAcquired) {
					t.Fatalf("Transaction = %v, want the error of the killed connection", err)
				}
				if n := countRows(t, d, admin, work, "slot = ?", key); n != 0 {
					t.Errorf("%d row(s) of the killed transaction committed", n)
				}
				mustFree(t, d, admin, named(key))
				if err := gormlock.Transaction(dbB, key, func(tx *gorm.DB) error { return insert(tx, key, "B") }); err != nil {
					t.Fatalf("another instance after the kill: %v", err)
				}
			}
			t.Logf("figure: Transaction on %s, connection killed mid-fn -> fn's next statement fails, nothing committed, Transaction returned after %v", k, took)
		})

		t.Run("session", func(t *testing.T) {
			const keepalive = 200 * time.Millisecond
			var took stats
			for i := range rounds {
				key := fmt.Sprintf("chaos-midfn-session-%s-%d", k, i)
				var cause error
				dt, err := killMidFn(t, d, admin, named(key), func(started chan<- struct{}, killed <-chan struct{}) error {
					return gormlock.Session(dbA, key, func(ctx context.Context) error {
						close(started)
						<-killed
						select {
						case <-ctx.Done():
							cause = context.Cause(ctx)
						case <-time.After(30 * time.Second):
						}
						return ctx.Err()
					}, ormlock.WithKeepalive(keepalive))
				})
				took = append(took, dt)
				t.Logf("round %d: Session returned %v after the kill: %v", i, dt.Round(time.Millisecond), err)
				if !errors.Is(cause, ormlock.ErrLockLost) {
					t.Errorf("context.Cause(ctx) = %v, want ErrLockLost", cause)
				}
				if !errors.Is(err, ormlock.ErrLockLost) {
					t.Fatalf("Session = %v, want ErrLockLost", err)
				}
				if dt > 20*keepalive+10*time.Second {
					t.Errorf("loss reported %v after the kill; keepalive %v", dt, keepalive)
				}
				mustFree(t, d, admin, named(key))
			}
			t.Logf("figure: Session on %s (keepalive %v), lock connection killed -> fn's context cancelled with ErrLockLost, Session returned after %v", k, keepalive, took)
		})

		for _, claim := range []bool{false, true} {
			name := "runonce"
			if claim {
				name = "runonce-claim"
			}
			t.Run(name, func(t *testing.T) {
				job := "chaos-midfn-" + name + "-" + string(k)
				slot := time.Date(2032, 2, 2, 0, 0, 0, 0, time.UTC)
				opts := func(owner string) []ormlock.Option {
					o := []ormlock.Option{ormlock.WithLedgerTable(led), ormlock.WithOwner(owner)}
					if claim {
						o = append(o, ormlock.WithClaim(), ormlock.WithKeepalive(200*time.Millisecond))
					}
					return o
				}
				took, err := killMidFn(t, d, admin, lockName{key: ormlock.RunKey(job, slot)}, func(started chan<- struct{}, killed <-chan struct{}) error {
					return gormlock.RunOnce(dbA, job, slot, func(tx *gorm.DB) error {
						if !claim {
							if err := insert(tx, job, "A"); err != nil {
								return err
							}
						}
						close(started)
						<-killed
						if claim {
							// fn runs outside a transaction; it learns of the
							// loss through its context
							ctx := tx.Statement.Context
							select {
							case <-ctx.Done():
							case <-time.After(30 * time.Second):
							}
							return ctx.Err()
						}
						return insert(tx, job, "A2")
					}, opts("A")...)
				})
				t.Logf("figure: RunOnce (%s) on %s, first runner's connection killed -> returned %v later: %v", name, k, took.Round(time.Millisecond), err)
				if err == nil || errors.Is(err, ormlock.ErrNotAcquired) {
					t.Fatalf("first runner: %v, want the error of the killed connection", err)
				}
				if claim && !errors.Is(err, ormlock.ErrLockLost) {
					t.Errorf("first runner (claim): %v, want ErrLockLost", err)
				}
				if rs, err := gormlock.Runs(dbB, job, 10, ormlock.WithLedgerTable(led)); err != nil {
					t.Fatal(err)
				} else if len(rs) > 0 && rs[0].Status == "done" {
					t.Fatalf("the killed run is marked done: %+v", rs[0])
				} else {
					t.Logf("ledger after the kill: %+v", rs)
				}
				mustFree(t, d, admin, lockName{key: ormlock.RunKey(job, slot)})

				ran := 0
				retry := func(tx *gorm.DB) error {
					ran++
					if claim {
						return nil
					}
					return insert(tx, job, "B")
				}
				if err := gormlock.RunOnce(dbB, job, slot, retry, opts("B")...); err != nil {
					t.Fatalf("retry by another instance: %v", err)
				}
				if err := gormlock.RunOnce(dbA, job, slot, retry, opts("C")...); !errors.Is(err, ormlock.ErrAlreadyDone) {
					t.Fatalf("third call: %v, want ErrAlreadyDone", err)
				}
				if ran != 1 {
					t.Errorf("fn ran %d times after the kill, want 1", ran)
				}
				rs, err := gormlock.Runs(dbB, job, 10, ormlock.WithLedgerTable(led))
				if err != nil {
					t.Fatal(err)
				}
				if len(rs) != 1 || rs[0].Status != "done" || rs[0].Owner != "B" {
					t.Fatalf("ledger %+v, want exactly one done run, by B", rs)
				}
				if !claim {
					if n := countRows(t, d, admin, work, "slot = ?", job); n != 1 {
						t.Errorf("%d work rows for the slot, want 1 (B's)", n)
					}
				}
			})
		}
	})
}

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
