package chaos_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"go/build"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
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
