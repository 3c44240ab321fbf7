// Package scheduler connects job schedulers to ormlock, so that of several
// replicas running the same schedule, each scheduled run happens once:
//
//   - [Locker]: a gocron v2 distributed locker (gocron.WithDistributedLocker)
//     with RunOnce semantics — one run per (job, slot), recorded in the
//     ledger, however far apart the replicas' clocks and start times are.
//   - [Elector]: a gocron v2 elector (gocron.WithDistributedElector): one
//     replica leads, through a long-held lock, and only the leader runs jobs.
//   - [JobWrapper]: a robfig/cron v3 JobWrapper with the Locker's semantics.
//
// Each takes a [Backend] from the package of your data layer:
// gormsched.Backend on a *gorm.DB, entsched.Backend on an ent client,
// sqlsched.Backend on a *sql.DB, pgxsched.Backend on a *pgxpool.Pool, with
// ormlock options such as the namespace, the ledger's owner id or
// [ormlock.WithCatchUp].
//
//	db.Use(gormlock.New(ormlock.WithOwner(hostname)))
//	if err := gormlock.Migrate(db); err != nil { ... } // the ledger table
//	midnight, _ := ormlock.Cron("0 0 * * *", berlin)
//	locker, err := scheduler.NewLocker(gormsched.Backend(db), nil, scheduler.WithStrict(),
//		scheduler.WithJobSchedule("daily-settlement", midnight))
//	s, err := gocron.NewScheduler(gocron.WithLocation(berlin), gocron.WithDistributedLocker(locker),
//		gocron.WithGlobalJobOptions(locker.RecordFailures()))
//	s.NewJob(gocron.CronJob("0 0 * * *", false), gocron.NewTask(locker.Task("daily-settlement", settle)),
//		gocron.WithName("daily-settlement")) // settle(ctx) runs under the run's lock
//
// This package is a module of its own (github.com/ormlock/ormlock/scheduler)
// so that the library's go.mod names no scheduler.
//
// The cron dialect, how a firing maps to its slot, and each adapter's
// behaviour (skips, errors, contexts, options, fail closed) are described
// once, in docs/SCHEDULES.md; the function docs are short and link there.
//
// # Why slots, not a mutex
//
// A distributed mutex on the job name makes runs exclusive, not unique:
// when replica A fires at 00:00:00.0 and finishes in 200 ms, replica B,
// whose timer fires at 00:00:00.3, finds the mutex free and runs the job a
// second time. The adapters here map the time a job fires to its slot — the
// scheduled time it is for, from an [ormlock.Schedule] ([ormlock.Cron],
// [ormlock.Every]) — and claim (job, slot) in the RunOnce ledger: B finds
// the slot done ([ormlock.ErrAlreadyDone]) and skips. A trigger up to
// [ormlock.SlotTolerance] early (at most half the period) counts for the
// scheduled time it precedes, so a replica whose clock runs ahead agrees on
// the slot too.
//
// # Decisions
//
//   - One package per backend, in this one module: package scheduler
//     imports no ORM, scheduler/gormsched imports GORM, scheduler/entsched
//     ent, scheduler/sqlsched database/sql only and scheduler/pgxsched pgx
//     only. Measured with scripts/consumer-check and with an
//     empty module cache: a GORM + gocron program that imports scheduler and
//     gormsched downloads 26 module zips and links 17 modules, none of them
//     ent or atlas (before, with scheduler.GORM in this package: 38 zips, 18
//     linked modules, ent among them); the ent + gocron one downloads and
//     links no GORM, and the database/sql + gocron and pgxpool + gocron
//     ones neither (consumer-check's sqlsched and pgxsched). Separate modules per backend were not needed: `go mod
//     tidy` loads the packages a program imports and their tests, so what
//     matters is that no package a program imports, nor its tests, imports
//     the other ORM. That is why this module's tests live in
//     internal/schedtest, which no program imports; the packages' own test
//     files are ORM-free (scheduler) or use their own ORM only (examples).
//   - A job that fires again within a slot it has already run or skipped
//     fires more often than the schedule it is mapped by, and its extra
//     firings are skipped in silence: it is reported through the error
//     handler at its second repeat in one slot, or at a repeat in two slots
//     running (one repeat can be timer jitter around the middle of two
//     slots, or gocron's RunNow). [WithStrict] refuses jobs without their
//     own schedule.
//   - Catch-up ([ormlock.WithCatchUp] among the Backend's options): the
//     JobWrapper catches up at every firing, with either policy; the gocron
//     Locker answers one firing with one run, so it takes CatchUpLatest
//     only, at a job's first firing after start (start the job with
//     gocron.WithStartImmediately to catch up at once), and the job asks
//     [Locker.Slot] which slot it runs. The catch-up window and
//     [WithPrune]'s cut are judged by the database server's clock; a
//     WithPrune window shorter than the catch-up window plus 1 minute is
//     refused, and a replica whose clock ([WithClock]) is more than 1
//     minute from the server's runs nothing with catch-up and reports an
//     error naming the difference. See docs/SCHEDULES.md (Clocks of
//     catch-up and Prune).
//   - Claim mode. The job runs outside any transaction (the scheduler calls
//     it, not ormlock), so the adapters use RunOnce's claim mode
//     ([ormlock.WithClaim]): the (job, slot) lock is held on a dedicated
//     connection with a keepalive, a 'running' row is committed before the
//     job starts, and the row is marked 'done' (or, for a failed [JobFunc]
//     or a panic, 'failed', which a later trigger of the slot may retry)
//     when it ends.
//   - Skips are not errors to report. ErrAlreadyDone and ErrNotAcquired are
//     what every replica but one sees at every run; they reach gocron (which
//     skips the run) but not the error handler. Everything else does
//     ([WithErrorHandler]; the default logs through log/slog).
//   - Contexts. gocron hands the job's context to Lock and Unlock; it is
//     cancelled at shutdown, possibly while the job runs. The lock attempt
//     honours it; the hold and the release do not (Unlock ignores its
//     context), so a shutdown never leaves a held lock or a 'running' row.
//     ormlock's own release paths are detached from cancellation too
//     (context.WithoutCancel, bounded by timeouts).
//   - The job's context. gocron's Locker interface cannot hand the job a
//     context, so a gocron task runs under gocron's own unless
//     [Locker.Task] wraps it; wrapped, as a [JobFunc] under the
//     [JobWrapper], it runs under its run's lock context, on every
//     backend: [ormlock.Held] true while the lock is held, [ormlock.Slot]
//     the run's slot, derived from the context the run's ormlock.Hook
//     Start returned (a tracer's span parents the job's work), ended with
//     cause [ormlock.ErrLockLost] on a loss. Under the [Elector], or
//     unwrapped, a job gets none of that. gocron calls Lock and the task
//     on one goroutine with one context per job, shared by all its runs;
//     the Locker hands the claimed run to the task by that context, and
//     serializes the hand-off per job (a Lock does not return while an
//     earlier run of its job waits for its task), so two runs in progress
//     never get each other's context. A task whose call no Lock preceded
//     on its context runs nothing and says why. See docs/SCHEDULES.md (The
//     job's context).
//   - gocron does not tell a locker how the job ended: the Locker marks a
//     run 'done' at Unlock unless gocron's event listeners of
//     [Locker.RecordFailures] (gocron v2.21 calls them before Unlock) said
//     the job failed or panicked, which marks it 'failed' (retried by a
//     later firing in the same slot or a catch-up, not by the next slot's).
//   - The Elector is for "one replica does the scheduling" and is only as
//     exclusive as the keepalive allows (see [Elector]); the Locker gives
//     the stronger, per-run guarantee. gocron consults the Elector instead
//     of the Locker when both are set.
//   - Schedules speak the scheduler's dialect: [ormlock.Cron] parses with
//     robfig/cron's own parser, five fields as gocron's CronJob(expr,
//     false), six (with seconds) as CronJob(expr, true) and
//     cron.WithSeconds(), and [ormlock.Every] (or "@every d") anchors
//     intervals to the Unix epoch, so every firing maps to its own slot.
//   - A cancelled context while Lock claims the run (a shutdown, a removed
//     job) is a skip: the error wraps ErrNotAcquired and the context's
//     cause, and is not reported.
//   - Slots, not jobs, are locked by default: a job that outlasts its period
//     runs in two slots at once. [WithExclusive] also locks the job for the
//     duration of each run (the next firing skips, or waits).
//   - The ledger keeps a row per run until pruned: [WithPrune] prunes it
//     after runs, at most hourly (or call gormlock.Prune yourself).
//   - Fail closed: a constructor that fails returns, with its error, an
//     adapter that runs nothing (Lock and IsLeader return the error, the
//     wrapper reports it), so an ignored error cannot run jobs unlocked;
//     nil and zero values refuse too.
//   - Operators' controls (ormlock.Pause, Resume, Skip, Rerun, carried
//     out by the adapters' Act) reach the Locker and the JobWrapper
//     through RunScheduled, on every replica. A paused job's firing runs
//     nothing, its slot is recorded 'skipped', and the error wraps
//     [ormlock.ErrPaused]: a skip, not reported. A slot asked to rerun
//     runs once on the next firing of any replica, after the firing's own
//     slot: the JobWrapper calls its job again (a [JobFunc] reads the
//     slot with ormlock.Slot); the Locker calls the function of the job's
//     [Locker.Task] itself, before Unlock returns; a Locker job without a
//     Task, which the Locker cannot call, runs the rerun in place of a
//     firing whose own slot is taken (with several replicas, the next
//     firing; [Locker.Slot] names it). The [Elector] knows no jobs: the
//     job controls do not reach jobs run under it alone. See
//     docs/SCHEDULES.md (Operators' controls).
//   - The ledger table is not created here: call gormlock.Migrate (or
//     entlock.Migrate, sqllock.Migrate, pgxlock.Migrate) at start-up, as for RunOnce; a missing table makes
//     every run fail with an error that says so.
package scheduler
