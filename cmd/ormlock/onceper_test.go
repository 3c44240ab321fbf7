package main_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/testdb"
)

// --once-per across three processes: one runs COMMAND, the two others find
// the slot done; a later trigger too.
func TestOncePerThreeHosts(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		table := ledgerTable(t, k)
		code, out, stderr := runBin(t, k, "migrate", "--ledger-table", table)
		want(t, code, stderr, 0)
		if !strings.Contains(out, "ready") {
			t.Errorf("migrate said %q", out)
		}
		job := uniq(t, "job")
		args := []string{"run", "--once-per", "0 3 * * *", "--tz", "Europe/Berlin", "--ledger-table", table,
			"--wait", "1m", job, "--", "sh", "-c", `echo "ran $ORMLOCK_JOB $ORMLOCK_SLOT"; sleep 1`}
		var ps []*proc
		for range 3 {
			ps = append(ps, start(t, k, args...))
		}
		ran, done := 0, 0
		for _, p := range ps {
			switch c := p.wait(t, time.Minute); c {
			case 0:
				ran++
				if !strings.Contains(p.stdout.String(), "ran "+job+" 20") {
					t.Errorf("COMMAND's environment: %q", p.stdout)
				}
			case 76:
				done++
				want(t, c, p.stderr.String(), 76, "already done", "COMMAND not run")
				if p.stdout.String() != "" {
					t.Errorf("COMMAND ran on a done slot: %q", p.stdout)
				}
			default:
				t.Errorf("exit status %d, want 0 or 76; stderr:\n%s", c, p.stderr)
			}
		}
		if ran != 1 || done != 2 {
			t.Errorf("%d runs and %d already done, want 1 and 2", ran, done)
		}
		// A later trigger of the same slot; without --wait; --done-exit-code.
		code, out, stderr = runBin(t, k, "run", "--once-per", "0 3 * * *", "--tz", "Europe/Berlin", "--ledger-table", table,
			"--done-exit-code", "0", job, "--", "echo", "ran")
		want(t, code, stderr, 0, "already done")
		if out != "" {
			t.Errorf("COMMAND ran on a done slot: %q", out)
		}
		code, out, stderr = runBin(t, k, "runs", "--ledger-table", table, job)
		want(t, code, stderr, 0)
		if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.Contains(lines[1], " done ") {
			t.Errorf("runs:\n%s", out)
		}
	})
}

// A failed COMMAND leaves the slot retryable: the next trigger runs it.
func TestOncePerFailedRetries(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		table := ledgerTable(t, k)
		code, _, stderr := runBin(t, k, "migrate", "--ledger-table", table)
		want(t, code, stderr, 0)
		job := uniq(t, "job")
		run := func(script string) (int, string, string) {
			return runBin(t, k, "run", "--once-per", "1h", "--ledger-table", table, job, "--", "sh", "-c", script)
		}
		code, _, stderr = run("exit 5")
		want(t, code, stderr, 5)
		code, out, _ := runBin(t, k, "runs", "--ledger-table", table, job)
		if code != 0 || !strings.Contains(out, " failed ") || !strings.Contains(out, "status 5") {
			t.Errorf("runs after a failure (%d):\n%s", code, out)
		}
		code, out, stderr = run("echo retried")
		want(t, code, stderr, 0)
		if out != "retried\n" {
			t.Errorf("retry: stdout %q", out)
		}
		code, _, stderr = run("echo again")
		want(t, code, stderr, 76, "already done")

		// With --wait, a host that finds the slot running waits and, when
		// that run fails, runs it itself.
		job2 := uniq(t, "job2")
		g, waitFor := gate(t)
		a := start(t, k, "run", "--once-per", "1h", "--ledger-table", table, job2, "--", "sh", "-c", "echo started; "+waitFor+"; exit 3")
		a.waitOutput(t, "started", time.Minute)
		b := start(t, k, "run", "--once-per", "1h", "--ledger-table", table, "--wait", "1m", job2, "--", "echo", "took over")
		time.Sleep(300 * time.Millisecond) // most likely waiting by now; either way b must run it
		letGo(t, g)
		want(t, a.wait(t, time.Minute), a.stderr.String(), 3)
		want(t, b.wait(t, time.Minute), b.stderr.String(), 0)
		if b.stdout.String() != "took over\n" {
			t.Errorf("the waiting host did not retry the failed slot: %q", b.stdout)
		}
	})
}

// The ledger is the library's: a slot done by gormlock.RunOnce is done for
// the command, and the other way round.
func TestOncePerSharesLedgerWithGo(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, table := openLedger(t, k)
		sched, err := ormlock.Every(time.Hour, time.UTC)
		if err != nil {
			t.Fatal(err)
		}
		slot := sched.Slot(time.Now())
		goJob, cmdJob := uniq(t, "go-first"), uniq(t, "cmd-first")
		if err := gormlock.RunOnce(db, goJob, slot, func(*gorm.DB) error { return nil },
			ormlock.WithLedgerTable(table), ormlock.WithClaim()); err != nil {
			t.Fatal(err)
		}
		code, out, stderr := runBin(t, k, "run", "--once-per", "1h", "--ledger-table", table, goJob, "--", "echo", "ran")
		if time.Now().Before(slot.Add(time.Hour - ormlock.SlotTolerance)) {
			want(t, code, stderr, 76, "already done")
			if out != "" {
				t.Errorf("COMMAND ran on a slot done in Go: %q", out)
			}
		}
		before := sched.Slot(time.Now())
		code, _, stderr = runBin(t, k, "run", "--once-per", "1h", "--ledger-table", table, cmdJob, "--", "true")
		want(t, code, stderr, 0)
		if !sched.Slot(time.Now()).Equal(before) {
			return // the hour turned while the command ran: its slot is unknown
		}
		err = gormlock.RunOnce(db, cmdJob, before, func(*gorm.DB) error {
			t.Errorf("Go ran a slot done by the command")
			return nil
		}, ormlock.WithLedgerTable(table))
		if !errors.Is(err, ormlock.ErrAlreadyDone) {
			t.Errorf("RunOnce after the command: %v, want ErrAlreadyDone", err)
		}
	})
}

// Without a ledger table, --once-per says how to create one.
func TestOncePerNoLedger(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		code, _, stderr := runBin(t, k, "run", "--once-per", "@daily", "--ledger-table", "no_such_ledger", uniq(t, "job"), "--", "true")
		want(t, code, stderr, 70, "no_such_ledger", "create it with: ormlock migrate")
		if strings.Contains(stderr, "Migrate") {
			t.Errorf("the hint names the Go function too: %s", stderr)
		}
	})
}

// A --once-per run whose lock is lost ends COMMAND, exits 77 and leaves the
// slot failed, so the next trigger runs it.
func TestOncePerLockLost(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, table := openLedger(t, k)
		sched, err := ormlock.Every(24*time.Hour, time.UTC)
		if err != nil {
			t.Fatal(err)
		}
		job := uniq(t, "job")
		slot := sched.Slot(time.Now())
		p := start(t, k, "run", "--once-per", "24h", "--ledger-table", table, "--keepalive", "200ms", job, "--",
			"sh", "-c", "echo started; exec sleep 60")
		p.waitOutput(t, "started", time.Minute)
		killHolder(t, k, db, keys.NameValue(keys.RunKey(job, slot)))
		want(t, p.wait(t, time.Minute), p.stderr.String(), 77, "lock lost")
		runs, err := gormlock.Runs(db, job, 5, ormlock.WithLedgerTable(table))
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) != 1 || runs[0].Status != "failed" || !strings.Contains(runs[0].Error, "lock") {
			t.Errorf("ledger after the loss: %+v", runs)
		}
		if !sched.Slot(time.Now()).Equal(slot) {
			return // midnight passed: the retry below would be another slot
		}
		code, out, stderr := runBin(t, k, "run", "--once-per", "24h", "--ledger-table", table, job, "--", "echo", "retried")
		want(t, code, stderr, 0)
		if out != "retried\n" {
			t.Errorf("retry: %q", out)
		}
	})
}

// --catch-up runs the slots of the window that have no 'done' row before
// the current one — each, oldest first (--catch-up-policy all), or the
// newest (latest) — and exports each run's own slot as ORMLOCK_SLOT; a
// second call finds everything done.
func TestOncePerCatchUp(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		_, table := openLedger(t, k)
		hourly, err := ormlock.Every(time.Hour, time.UTC)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct{ policy, want string }{{"all", "-3h -2h -1h 0h"}, {"latest", "-1h 0h"}} {
			job := uniq(t, c.policy)
			now := hourly.Slot(time.Now())
			// a window that reaches a minute before the slot 3 h ago
			window := (time.Since(now.Add(-3*time.Hour)) + time.Minute).Truncate(time.Second).String()
			code, out, stderr := runBin(t, k, "run", "--once-per", "1h", "--catch-up", window, "--catch-up-policy", c.policy,
				"--ledger-table", table, job, "--", "sh", "-c", `echo "$ORMLOCK_SLOT"`)
			want(t, code, stderr, 0)
			if !hourly.Slot(time.Now()).Equal(now) {
				return // the hour turned while the command ran
			}
			var got []string
			for _, l := range strings.Fields(out) {
				s, err := time.Parse(time.RFC3339, l)
				if err != nil {
					t.Fatalf("ORMLOCK_SLOT %q: %v", l, err)
				}
				got = append(got, fmt.Sprintf("%dh", int(s.Sub(now)/time.Hour)))
			}
			if strings.Join(got, " ") != c.want {
				t.Errorf("%s: ran for %v, want %s", c.policy, got, c.want)
			}
			code, _, stderr = runBin(t, k, "run", "--once-per", "1h", "--catch-up", window, "--catch-up-policy", c.policy,
				"--ledger-table", table, job, "--", "true")
			want(t, code, stderr, 76, "already done")
		}
		code, _, stderr := runBin(t, k, "run", "--catch-up", "1h", "--ledger-table", table, "x", "--", "true")
		want(t, code, stderr, 2, "--once-per")
		code, _, stderr = runBin(t, k, "run", "--once-per", "1h", "--catch-up-policy", "some", "--ledger-table", table, "x", "--", "true")
		want(t, code, stderr, 2, "latest or all")
	})
}

// ormlock holder JOB finds a --once-per run of JOB, whose lock is the run's
// (JOB, slot) lock, from the ledger's running row; once its ormlock is
// killed, the row still says running, holder says that nobody holds it and
// runs shows it stale.
func TestHolderFindsOncePerRun(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		t.Parallel() // one server each
		table := ledgerTable(t, k)
		code, _, stderr := runBin(t, k, "migrate", "--ledger-table", table)
		want(t, code, stderr, 0)
		job := uniq(t, "job")
		code, out, stderr := runBin(t, k, "holder", "--ledger-table", table, job)
		want(t, code, stderr, 0, "is free without a namespace", "has no run of it holding its lock")
		if out != "free\n" {
			t.Errorf("holder before the run: %q", out)
		}
		_, waitFor := gate(t)
		p := start(t, k, "run", "--once-per", "@daily", "--ledger-table", table, job, "--", "sh", "-c", "echo started; "+waitFor)
		p.waitOutput(t, "started", time.Minute)
		code, out, stderr = runBin(t, k, "holder", "--ledger-table", table, job)
		want(t, code, stderr, 0)
		slot := time.Now().UTC().Truncate(24 * time.Hour).Format(time.RFC3339)
		if !strings.HasPrefix(out, "run="+slot+" held pid=") || strings.Count(out, "\n") != 1 {
			t.Errorf("holder of the running --once-per job: %q, want run=%s held pid=...", out, slot)
		}
		if strings.Contains(stderr, "free") {
			t.Errorf("holder says free: %s", stderr)
		}
		// Killed, ormlock leaves its row running; the server frees the lock.
		if err := p.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		p.wait(t, time.Minute)
		deadline := time.Now().Add(30 * time.Second)
		for {
			code, out, stderr = runBin(t, k, "holder", "--ledger-table", table, job)
			if out == "free\n" || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		want(t, code, stderr, 0, "the run of slot "+slot+" is recorded running", "nobody holds its lock")
		if out != "free\n" {
			t.Errorf("holder after the kill: %q", out)
		}
		// runs lists it as stale
		code, out, stderr = runBin(t, k, "runs", "--ledger-table", table, job)
		want(t, code, stderr, 0)
		if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.HasPrefix(strings.Join(strings.Fields(lines[1]), " "), slot+" stale ") {
			t.Errorf("runs after the kill:\n%s\nwant the slot stale", out)
		}
	})
}

// On MySQL/MariaDB a DSN without a database reaches the locks (GET_LOCK
// names are server-wide) but no ledger: holder still answers, and says the
// ledger was not read.
func TestHolderWithoutLedger(t *testing.T) {
	dsn := testdb.DSN(t, testdb.MariaDB)
	i, j := strings.Index(dsn, ")/"), strings.Index(dsn, "?")
	if i < 0 || j < i {
		t.Fatalf("unexpected MariaDB DSN form")
	}
	noDB := dsn[:i+2] + dsn[j:]
	code, out, stderr := runBin(t, "", "holder", "--dsn", noDB, uniq(t, "job"))
	want(t, code, stderr, 0, "is free without a namespace", "was not read")
	if out != "free\n" {
		t.Errorf("holder without a database: %q", out)
	}
	testdb.AssertNoLeaks(t, testdb.MariaDB)
}

// openLedger opens GORM on a new pool of kind k and creates the test's own
// ledger table (ledgerTable) with gormlock.Migrate.
func openLedger(t *testing.T, k testdb.Kind) (*gorm.DB, string) {
	t.Helper()
	db := openGorm(t, k)
	table := ledgerTable(t, k)
	if err := gormlock.Migrate(db, ormlock.WithLedgerTable(table)); err != nil {
		t.Fatal(err)
	}
	return db, table
}
