// Command ormlock is flock(1) for a fleet: it runs a command while holding a
// lock on the database the fleet already has (PostgreSQL advisory locks,
// MySQL/MariaDB GET_LOCK), or at most once per schedule slot, with the keys
// and the ledger of the Go library, so a Go service (gormlock, entlock) and a
// shell job that name the same key exclude each other.
//
//	go install github.com/ormlock/ormlock/cmd/ormlock@latest
//
//	ormlock run [flags] KEY -- COMMAND [ARGS...]   gormlock.Session around COMMAND
//	ormlock run --once-per SCHEDULE [flags] JOB -- COMMAND [ARGS...]
//	                                               gormlock.RunOnce, claim mode
//	ormlock holder KEY                             gormlock.Holder
//	ormlock runs JOB                               gormlock.Runs
//	ormlock key NAME                               keyhash: bigint, pair, MySQL name, psql
//	ormlock migrate                                gormlock.Migrate
//
// The database is --dsn or $ORMLOCK_DSN: a postgres:// (or postgresql://)
// URL or key=value string, opened with pgx, or a go-sql-driver MySQL DSN.
// Behind PgBouncer in transaction mode the URL needs
// default_query_exec_mode=simple_protocol.
//
// # Exit statuses of ormlock run
//
//	COMMAND's  COMMAND ran and exited: its status; 128+n when signal n killed it
//	2          usage error: bad flags, KEY, DSN, schedule or time zone, missing --
//	70         ormlock's own error (EX_SOFTWARE): server unreachable, query
//	           failed, ledger table missing
//	75         the lock is held elsewhere, COMMAND not run (EX_TEMPFAIL;
//	           --conflict-exit-code N, as flock's -E)
//	76         --once-per: the slot is already done, COMMAND not run
//	           (--done-exit-code N)
//	77         the lock was lost while COMMAND ran; COMMAND got SIGTERM, then
//	           SIGKILL after --grace (default 10s)
//	126, 127   COMMAND cannot be executed / is not found (as in a shell)
//	128+n      ormlock got signal n before COMMAND started: it exits at once
//
// The other commands exit 0, 2 on a usage error, 70 on any other error.
// An unreachable server is 70, not 2: the invocation may be right and a
// retry may work.
//
// # Decisions
//
// The lock is released only after COMMAND has exited, whatever signal
// ormlock got; signals are forwarded, not acted on. COMMAND stays in
// ormlock's process group, so it can use the terminal; Ctrl-C and Ctrl-\ at
// the terminal reach it directly, and ormlock (on Linux) does not forward
// SIGINT or SIGQUIT while its group is the terminal's foreground group, so
// they arrive once.
//
// A lock lost while COMMAND runs ends COMMAND, because another host may
// already be running it; a loss found only by the release, after COMMAND
// exited, is reported as lost too (status 77), since the exclusion may not
// have held to the end. On Linux COMMAND is tied to ormlock's life
// (Pdeathsig SIGKILL): if ormlock is killed, the server frees the lock at
// once, and COMMAND must not run on without it.
//
// The lock follows COMMAND's own process: unlike flock(1), whose lock is an
// open file that children inherit, it ends when COMMAND exits, even if
// COMMAND left children running, and SIGTERM after a loss goes to COMMAND
// alone (a shell script should exec its last command or pass TERM on with a
// trap).
//
// A signal before COMMAND starts makes ormlock exit at once: closing its
// connections ends the wait or frees the lock on the server. It does not
// cancel the wait through the driver, because pgx then sends a cancel
// request, and PgBouncer 1.18.0 dies when the client that sent one goes away
// before PgBouncer has passed it on (pgbouncer issue 801).
//
// With --once-per, KEY is the job name and the lock is RunOnce's (job, slot)
// lock; the slot is taken from the schedule in --tz (default UTC, so hosts
// in different zones agree). COMMAND's environment gets ORMLOCK_KEY,
// ORMLOCK_NAMESPACE, and with --once-per ORMLOCK_JOB and ORMLOCK_SLOT; the
// fencing token will be ORMLOCK_FENCING_TOKEN once the library issues one.
package main
