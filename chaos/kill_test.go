package chaos_test

import (
	"bufio"
	"context"
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
