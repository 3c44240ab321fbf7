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
//	ormlock lead [flags] KEY -- COMMAND [ARGS...]  gormlock.Lead around COMMAND
//	ormlock holder KEY                             gormlock.Holder (for a --once-per JOB,
//	                                               of its running runs, from the ledger)
//	ormlock runs JOB                               gormlock.Runs
//	ormlock key NAME                               keyhash: bigint, pair, MySQL name, psql
//	ormlock migrate                                gormlock.Migrate
//	ormlock migrate --print [--dialect D]          ormlock.MigrateSQL, without connecting
//	ormlock fence advance --by N                   gormlock.AdvanceFences, after promoting
//	                                               an asynchronous replica
//	ormlock --version                              the module version it was built from
//	ormlock ui [flags]                             webui.Handler on 127.0.0.1:8080
//	ormlock runs --json JOB, holder --json KEY     the JSON API's RunList, HolderList
//	ormlock pause JOB, ormlock resume JOB          gormlock.Act(ormlock.Pause/Resume)
//	ormlock skip JOB SLOT, ormlock rerun JOB SLOT  gormlock.Act(ormlock.Skip/Rerun); SLOT RFC 3339
//	ormlock lead resign KEY                        gormlock.Act(ormlock.Resign), --cooldown
//	ormlock controls, ormlock actions [JOB]        gormlock.Controls, gormlock.Actions
//
// The actions take --author (default $USER@hostname) and --reason, and
// --json prints the actions log's entry; they change only ormlock's own
// tables. See docs/OPERATIONS.md (Command).
//
// The database is --dsn or $ORMLOCK_DSN: a postgres:// (or postgresql://)
// URL or key=value string, opened with pgx, or a mysql:// URL or a
// go-sql-driver MySQL DSN. A PostgreSQL DSN that names no
// default_query_exec_mode gets simple_protocol, which works behind
// PgBouncer in transaction mode (pgx's default, cache_statement, fails
// there before PgBouncer 1.21: "prepared statement "stmtcache_..." already
// exists", 42P05); a DSN that names a mode keeps it. --namespace, --ledger-table
// and --connect-timeout (default 10s: a server that accepts the connection
// and never answers fails then) default to $ORMLOCK_NAMESPACE,
// $ORMLOCK_LEDGER_TABLE and $ORMLOCK_CONNECT_TIMEOUT, --lease-table to
// $ORMLOCK_LEASE_TABLE.
//
// ormlock run --lease TTL and ormlock lead --lease TTL take KEY as a lease
// (ormlock.WithLease): a row of the lease table renewed every TTL/3 on no
// pinned connection, for PgBouncer in transaction mode and Galera clusters;
// COMMAND's $ORMLOCK_FENCING_TOKEN is its epoch. ormlock holder shows a
// key's lease when its server lock is free (--lease: the lease only).
//
// # Exit statuses of ormlock run
//
//	COMMAND's  COMMAND ran and exited: its status; 128+n when signal n killed it
//	2          usage error: bad flags, KEY, DSN, schedule or time zone, missing --
//	70         ormlock's own error (EX_SOFTWARE): server unreachable or
//	           refusing the login, query failed, ledger table missing
//	75         the lock is held elsewhere, COMMAND not run (EX_TEMPFAIL;
//	           --conflict-exit-code N, as flock's -E)
//	76         --once-per: the slot is already done, COMMAND not run
//	           (--done-exit-code N)
//	77         the lock was lost while COMMAND ran; COMMAND and every process
//	           it started got SIGTERM, then SIGKILL after --grace (default 10s)
//	126, 127   COMMAND cannot be executed / is not found (as in a shell)
//	128+n      ormlock got signal n before COMMAND started: it exits at once
//
// # Exit statuses of ormlock lead
//
//	COMMAND's  COMMAND exited by itself (or was killed by a signal, 128+n,
//	           one forwarded by ormlock too): its status
//	2          usage error
//	70         ormlock's own error: the server unreachable at the first
//	           contact (--connect-timeout) or refusing the login; later
//	           connection errors are retried by the campaign
//	77         the lock was found lost just as COMMAND exited by itself
//	126, 127   COMMAND cannot be executed / is not found
//	128+n      ormlock got signal n while COMMAND was not running
//	           (campaigning): it exits at once
//
// A lost leadership is no exit: COMMAND's processes are stopped as by
// ormlock run on a loss, and ormlock campaigns again.
//
// The other commands exit 0, 2 on a usage error, 70 on any other error;
// pause, resume, skip, rerun and lead resign exit 2 too when the action is
// refused (nothing changed then).
// An unreachable server is 70, not 2: the invocation may be right and a
// retry may work.
//
// # Decisions
//
// The lock covers COMMAND's whole process tree, as flock(1)'s lock, an open
// file its children inherit, does: a job that forks (bash -c 'work & wait',
// make, a launcher script) must not go on without the lock while another
// host runs it. ormlock starts COMMAND through a small supervisor, its own
// binary started again, which puts COMMAND in a process group of its own.
// On Linux the supervisor is a child subreaper (PR_SET_CHILD_SUBREAPER), so
// the processes COMMAND leaves behind become its children even when they
// started their own session (setsid, nohup, daemons), and it finds every
// live descendant in /proc. It stops them all, SIGTERM then SIGKILL after
// --grace, when the lock is lost, and when COMMAND exits while some still
// run; ormlock releases the lock only once none is left. The supervisor
// holds one end of a pipe from ormlock: when ormlock dies (kill -9, the OOM
// killer), the server frees the lock at once, and the supervisor kills
// every descendant with SIGKILL; COMMAND itself also has SIGKILL as its
// parent-death signal, should the supervisor die. No cgroup is needed: the
// supervisor is a subreaper before COMMAND starts, so no descendant escapes
// it. Only a SIGKILL sent to the supervisor itself leaves COMMAND's
// descendants to init.
//
// Signals ormlock gets are forwarded to COMMAND's process group, not acted
// on, and never dropped: at a terminal, COMMAND's group is made the
// foreground group and ormlock stays outside it, so Ctrl-C, Ctrl-\ and
// Ctrl-Z reach COMMAND once, straight from the terminal, and any signal
// that reaches ormlock was sent to it with kill and is passed on. (os/signal
// cannot tell a keyboard SIGINT from a kill, so this follows from the
// process layout.) When COMMAND stops at the terminal, the supervisor gives
// the terminal back to ormlock's group and stops that group, so the shell
// sees its job stopped; the shell's fg gives the terminal back to COMMAND.
//
// A lock lost while COMMAND runs ends its processes, because another host
// may already be running it; a loss found only by the release, after
// COMMAND exited, is reported as lost too (status 77), since the exclusion
// may not have held to the end.
//
// COMMAND does not inherit ORMLOCK_DSN, whose password a job that logs its
// environment would leak; --export-dsn passes the DSN on. PG* variables and
// MYSQL_PWD are left alone: jobs that run psql or mysql rely on them.
//
// On other Unix systems (macOS, the BSDs) there is no subreaper and no
// /proc: the supervisor stops the processes still in COMMAND's process
// group, on the same paths, but misses those that left it (setsid,
// daemons). On Windows ormlock starts COMMAND directly: a lost lock kills
// COMMAND alone, and nothing stops it when ormlock is killed.
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
// ORMLOCK_NAMESPACE, and with --once-per ORMLOCK_JOB and ORMLOCK_SLOT;
// ormlock lead --fencing adds the term's token as ORMLOCK_FENCING_TOKEN.
package main
