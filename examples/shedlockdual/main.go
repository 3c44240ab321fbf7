// Command shedlockdual shows the "both" release of a move from ShedLock to
// ormlock with gocron: while nodes that still run ShedLock and the new Go
// replicas run one job side by side, each Go replica takes ShedLock's lease
// row first, as a ShedLock node with usingDbTime() does, then ormlock's run
// of the slot, through one gocron.Locker ([Locker]); its job runs under the
// run's lock context (scheduler.Locker.Task). The ShedLock node is played
// here by a goroutine that takes the lease as ShedLock does ([Lease]).
//
// Run a few seconds of a job that fires every second on two Go replicas and
// one ShedLock node, and print who ran each second:
//
//	go run ./shedlockdual -dsn 'postgres://app@localhost:5432/app' -seconds 5
//	go run ./shedlockdual -dsn 'app:secret@tcp(127.0.0.1:3306)/app'
//
// It creates ShedLock's table and ormlock's ledger when they are missing.
// The program fails when two runs ever overlap, a Go replica's job ran
// outside its lock, or two Go runs claimed one slot.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/examples/internal/demo"
	"github.com/ormlock/ormlock/scheduler"
	"github.com/ormlock/ormlock/scheduler/sqlsched"
	"github.com/ormlock/ormlock/sqllock"
)

func main() { demo.Main("shedlockdual", run) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("shedlockdual", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dsn := fs.String("dsn", "", "PostgreSQL (postgres://...) or MySQL/MariaDB (user:pass@tcp(host:port)/db) DSN")
	job := fs.String("job", "shedlockdual-report", "the job's name: ShedLock's lock name and ormlock's job")
	replicas := fs.Int("replicas", 2, "Go replicas of the \"both\" release")
	seconds := fs.Int("seconds", 5, "how long to run the per-second job")
	work := fs.Duration("work", 100*time.Millisecond, "how long the job works")
	lag := fs.Duration("node-lag", 0, "how late the ShedLock node's timer fires after each second")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case *dsn == "":
		return errors.New("-dsn is required")
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	case *replicas < 1 || *seconds < 1 || *work <= 0 || *work >= 500*time.Millisecond || *lag < 0 || *lag >= 500*time.Millisecond:
		return errors.New("-replicas and -seconds must be positive, -work between 0 and 500ms, -node-lag at least 0 and under 500ms")
	}
	pg := demo.IsPostgres(*dsn)
	open := func() (*sql.DB, error) {
		if pg {
			return sql.Open("pgx", demo.PoolerSafe(*dsn))
		}
		return sql.Open("mysql", *dsn)
	}
	db, err := open()
	if err != nil {
		return err
	}
	defer db.Close()
	if err := createShedLockTable(ctx, db, pg); err != nil {
		return err
	}
	if err := sqllock.Migrate(ctx, db); err != nil { // ormlock's ledger
		return err
	}
	everySecond, err := ormlock.Cron("* * * * * *", time.UTC)
	if err != nil {
		return err
	}

	var t tally
	lease := func(db *sql.DB, owner string) *Lease {
		// lockAtMostFor outlasts the job; lockAtLeastFor covers the
		// nodes' timer skew, less than the period
		return &Lease{DB: db, Postgres: pg, Owner: owner, AtMost: 30 * time.Second, AtLeast: 700 * time.Millisecond}
	}
	var scheds []gocron.Scheduler
	for i := range *replicas {
		name := fmt.Sprintf("go-%c", 'a'+i)
		rdb, err := open() // a pool per replica, as separate processes have
		if err != nil {
			return err
		}
		defer rdb.Close()
		next, err := scheduler.NewLocker(sqlsched.Backend(rdb, ormlock.WithOwner(name)), everySecond,
			scheduler.WithErrorHandler(func(err error) { fmt.Fprintf(stderr, "%s: %v\n", name, err) }))
		if err != nil {
			return err
		}
		s, err := gocron.NewScheduler(gocron.WithLocation(time.UTC),
			gocron.WithDistributedLocker(Locker{Lease: lease(rdb, name), Next: next}))
		if err != nil {
			return err
		}
		_, err = s.NewJob(gocron.CronJob("* * * * * *", true), gocron.NewTask(next.Task(*job, func(ctx context.Context) error {
			slot, _ := ormlock.Slot(ctx)
			// ctx ends if the lock is lost (cause ormlock.ErrLockLost)
			// or gocron shuts down: the run is then recorded failed
			return t.run(ctx, name, slot, ormlock.Held(ctx), *work)
		})), gocron.WithName(*job))
		if err != nil {
			return err
		}
		scheds = append(scheds, s)
	}

	fmt.Fprintf(stdout, "shedlockdual: job %q every second for %ds: %d Go replicas (ShedLock's lease, then ormlock), one ShedLock node\n",
		*job, *seconds, *replicas)
	start := time.Now().Truncate(time.Second)
	for _, s := range scheds {
		s.Start()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { shedLockNode(ctx, lease(db, "shedlock-node"), *job, *lag, *work, &t, stop, stderr) })
	select {
	case <-ctx.Done():
	case <-time.After(time.Duration(*seconds) * time.Second):
	}
	close(stop)
	wg.Wait()
	for _, s := range scheds {
		if err := s.Shutdown(); err != nil {
			return err
		}
	}
	runs, err := sqllock.Runs(context.WithoutCancel(ctx), db, *job, 1000)
	if err != nil {
		return err
	}
	return t.report(stdout, start, runs)
}

// createShedLockTable creates ShedLock's documented table when it is
// missing: a deployment moving off ShedLock has it already.
func createShedLockTable(ctx context.Context, db *sql.DB, pg bool) error {
	ts := "TIMESTAMP(3)"
	if pg {
		ts = "TIMESTAMP"
	}
	_, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS shedlock (name VARCHAR(64) NOT NULL PRIMARY KEY,
	lock_until `+ts+` NOT NULL, locked_at `+ts+` NOT NULL, locked_by VARCHAR(255) NOT NULL)`)
	return err
}

// shedLockNode plays a node that still runs ShedLock: lag after every
// second it takes the lease on job, runs the job while it holds it, and
// releases it.
func shedLockNode(ctx context.Context, l *Lease, job string, lag, work time.Duration, t *tally, stop <-chan struct{}, stderr io.Writer) {
	for {
		now := time.Now()
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-time.After(now.Truncate(time.Second).Add(time.Second + lag).Sub(now)):
		}
		second := time.Now().Add(-lag).Truncate(time.Second)
		release, err := l.Take(ctx, job)
		if errors.Is(err, ormlock.ErrNotAcquired) {
			continue // a Go replica (or another node) runs it
		} else if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", l.Owner, err)
			continue
		}
		_ = t.run(ctx, l.Owner, second, true, work)
		if err := release(); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", l.Owner, err)
		}
	}
}

// tally records the runs of every node, and what must never happen.
type tally struct {
	mu      sync.Mutex
	running int
	runs    []ran
	faults  []string
}

type ran struct {
	by   string
	slot time.Time
}

// run records a run of the job by by for slot, works until work has passed
// or ctx ends (then returns its cause), and records a fault when another
// run was in progress or the run's lock was not held.
func (t *tally) run(ctx context.Context, by string, slot time.Time, held bool, work time.Duration) error {
	t.mu.Lock()
	t.running++
	t.runs = append(t.runs, ran{by, slot})
	if t.running > 1 {
		t.faults = append(t.faults, fmt.Sprintf("%s ran slot %s while another run was in progress", by, slot.Format("15:04:05")))
	}
	if !held {
		t.faults = append(t.faults, fmt.Sprintf("%s ran slot %s outside its lock (ormlock.Held false)", by, slot.Format("15:04:05")))
	}
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		t.running--
		t.mu.Unlock()
	}()
	select {
	case <-time.After(work):
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// report prints who ran each second and returns the faults, also checking
// that ormlock's ledger has one row per Go run since start (done, or
// failed when gocron's shutdown cut it short).
func (t *tally) report(w io.Writer, start time.Time, ledger []ormlock.Run) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	sort.Slice(t.runs, func(i, j int) bool { return t.runs[i].slot.Before(t.runs[j].slot) })
	goRuns := map[time.Time]int{}
	for _, r := range t.runs {
		fmt.Fprintf(w, "second %s  ran: %s\n", r.slot.Format("15:04:05"), r.by)
		if r.by != "shedlock-node" {
			goRuns[r.slot]++
		}
	}
	faults := t.faults
	recorded := 0
	for _, r := range ledger {
		if r.Status != "running" && !r.Slot.Before(start) {
			recorded++
		}
	}
	n := 0
	for slot, c := range goRuns {
		n += c
		if c > 1 {
			faults = append(faults, fmt.Sprintf("slot %s ran %d times on Go replicas", slot.Format("15:04:05"), c))
		}
	}
	if recorded != n {
		faults = append(faults, fmt.Sprintf("%d Go runs, %d in ormlock's ledger", n, recorded))
	}
	fmt.Fprintf(w, "%d runs, %d by Go replicas (each in ormlock's ledger), %d faults\n", len(t.runs), n, len(faults))
	if len(faults) > 0 {
		return errors.New(strings.Join(faults, "; "))
	}
	return nil
}
