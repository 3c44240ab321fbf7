package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	_ "time/tzdata" // --tz works on hosts and images without zoneinfo
)

// Exit statuses of ormlock itself; see the package doc. COMMAND's own status
// (0-255, 128+n when a signal n killed it) passes through otherwise.
const (
	exitUsage       = 2  // bad flags, key, DSN, schedule or a missing --
	exitError       = 70 // EX_SOFTWARE: the database is unreachable, or a query failed
	exitConflict    = 75 // EX_TEMPFAIL: the lock is held elsewhere; --conflict-exit-code
	exitAlreadyDone = 76 // --once-per: the slot is already done; --done-exit-code
	exitLockLost    = 77 // the lock was lost while COMMAND ran
	exitCannotExec  = 126
	exitNotFound    = 127
)

func main() {
	if os.Getenv(supervisorEnv) == "1" {
		os.Exit(supervise(os.Args[1:]))
	}
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

// usageError is an error of the invocation: ormlock exits with exitUsage.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// exitCode is an error that carries the status ormlock exits with.
type exitCode struct {
	code int
	err  error // printed when not nil
}

func (e *exitCode) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitCode) Unwrap() error { return e.err }

var commands = []struct {
	name, summary string
	run           func(args []string, stdout, stderr io.Writer) error
}{
	{"run", "run COMMAND while holding a lock, or once per schedule slot", runCmd},
	{"lead", "run COMMAND while this host leads, campaign again when it loses", leadCmd},
	{"holder", "show who holds a lock", holderCmd},
	{"runs", "show the last runs of a job from the ledger", runsCmd},
	{"key", "show the database keys a lock name maps to", keyCmd},
	{"migrate", "create the ledger table for --once-per", migrateCmd},
	{"fence", "advance every fencing counter after a failover (fence advance --by N)", fenceCmd},
	{"ui", "serve a read-only web view of the runs, locks and leaders", uiCmd},
	{"pause", "pause a job on every replica (its slots are recorded skipped)", pauseCmd},
	{"resume", "resume a paused job", resumeCmd},
	{"skip", "record a slot of a job skipped, so that it never runs", skipCmd},
	{"rerun", "run a failed, skipped or missed slot again at the job's next firing", rerunCmd},
	{"controls", "show the jobs' controls: paused or not, by whom, the schedule", controlsCmd},
	{"actions", "show the operators' actions log", actionsCmd},
}

const mainUsage = `ormlock: flock(1) for a fleet, on the database it already has.

Usage:
  ormlock run [flags] KEY -- COMMAND [ARGS...]
  ormlock lead [flags] KEY -- COMMAND [ARGS...]
  ormlock holder [flags] KEY
  ormlock runs [flags] JOB
  ormlock key [--namespace NS] NAME
  ormlock migrate [flags]
  ormlock fence advance --by N [flags]
  ormlock ui [flags]           (a web view on 127.0.0.1:8080)
  ormlock pause|resume [flags] JOB
  ormlock skip|rerun [flags] JOB SLOT        (SLOT: RFC 3339)
  ormlock lead resign [flags] KEY
  ormlock controls [flags]
  ormlock actions [flags] [JOB]
  ormlock help COMMAND         (or ormlock COMMAND --help)
  ormlock --version            (or ormlock version)

Commands:
%s
The database is --dsn or $ORMLOCK_DSN: a PostgreSQL URL or key=value string
(postgres://user:pass@host:5432/db), a MySQL URL (mysql://user:pass@host:3306/db,
the password URL-encoded) or a go-sql-driver MySQL DSN
(user:pass@tcp(host:3306)/db). A PostgreSQL DSN without
default_query_exec_mode gets default_query_exec_mode=simple_protocol, which
works behind PgBouncer in transaction mode (pgx's own default does not before
PgBouncer 1.21); a DSN that names a mode keeps it. --namespace,
--ledger-table and --connect-timeout (default 10s) likewise default to
$ORMLOCK_NAMESPACE, $ORMLOCK_LEDGER_TABLE and $ORMLOCK_CONNECT_TIMEOUT.

Keys and runs are those of the Go library (gormlock, entlock): a Go service
and a shell job that name the same key exclude each other.

Exit statuses of ormlock run:
  COMMAND's own   COMMAND ran: its exit status, or 128+n when signal n killed it
  2               usage error: bad flags, key, DSN or schedule, missing --
  70              ormlock's own error: database unreachable or refusing the
                  login, a query failed, no ledger table (run ormlock migrate)
  75              the lock is held elsewhere; COMMAND did not run
                  (--conflict-exit-code N)
  76              --once-per: the slot is already done; COMMAND did not run
                  (--done-exit-code N)
  77              the lock was lost while COMMAND ran; COMMAND and every
                  process it started were sent SIGTERM (SIGKILL after --grace)
  126, 127        COMMAND could not be executed / was not found
  128+n           ormlock was interrupted by signal n before COMMAND started
ormlock lead exits with COMMAND's status when it ends by itself, and as
ormlock run otherwise (2, 70, 77, 126, 127, 128+n): see ormlock lead --help.
The other commands exit 0, 2 on a usage error (pause, resume, skip, rerun
and lead resign also on an action refused) and 70 on any other error.

Examples:
  export ORMLOCK_DSN=postgres://app:secret@db.internal:5432/app
  ormlock migrate
  ormlock run backup -- /usr/local/bin/backup.sh      # one host at a time
  # crontab, the same line on every host: one of them runs it per night
  0 2 * * * ormlock run --once-per '0 2 * * *' --done-exit-code 0 --conflict-exit-code 0 nightly-report -- ./report.sh
  ormlock holder backup
  ormlock runs nightly-report
  ormlock runs --json nightly-report | jq '.runs[] | select(.status == "failed")'
  ormlock pause --reason "incident 42" nightly-report   # author: $USER@hostname
  ormlock rerun nightly-report 2026-12-03T02:00:00Z
  ormlock lead resign queue-consumer
`

func printMainUsage(w io.Writer) {
	var b strings.Builder
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, mainUsage, b.String())
}

// dispatch runs the command line args and returns the exit status.
func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printMainUsage(stderr)
		return exitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "-h", "-help", "--help", "help":
		if name == "help" && len(rest) > 0 {
			return dispatch([]string{rest[0], "--help"}, stdout, stderr)
		}
		printMainUsage(stdout)
		return 0
	case "-version", "--version", "version":
		return status(versionCmd(rest, stdout), stderr, "version")
	}
	for _, c := range commands {
		if c.name == name {
			return status(c.run(rest, stdout, stderr), stderr, c.name)
		}
	}
	// The whole usage would bury the one line that matters.
	if strings.HasPrefix(name, "-") {
		fmt.Fprintf(stderr, "ormlock: unknown flag %q before the command\n", name)
	} else {
		fmt.Fprintf(stderr, "ormlock: unknown command %q\n", name)
	}
	fmt.Fprintln(stderr, "ormlock: the commands are "+commandNames()+"; see ormlock help")
	return exitUsage
}

// commandNames lists the commands, for a message.
func commandNames() string {
	names := make([]string, 0, len(commands)+1)
	for _, c := range commands {
		names = append(names, c.name)
	}
	return strings.Join(append(names, "version"), ", ")
}

// status prints err (once, prefixed "ormlock: ") and maps it to an exit
// status.
func status(err error, stderr io.Writer, cmd string) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	printErr := func(err error) {
		msg := err.Error()
		if !strings.HasPrefix(msg, "ormlock: ") {
			msg = "ormlock: " + msg
		}
		fmt.Fprintln(stderr, msg)
	}
	var ue *usageError
	var ec *exitCode
	switch {
	case errors.As(err, &ue):
		printErr(err)
		fmt.Fprintf(stderr, "ormlock: see ormlock %s --help\n", cmd)
		return exitUsage
	case errors.As(err, &ec):
		if ec.err != nil {
			printErr(ec.err)
		}
		return ec.code
	}
	printErr(err)
	return exitError
}
