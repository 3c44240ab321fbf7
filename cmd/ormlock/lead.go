package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/config"
)

const leadUsage = `Usage: ormlock lead [flags] KEY -- COMMAND [ARGS...]

Campaigns for the leadership of KEY among the hosts that run the same line
(gormlock.Lead), runs COMMAND while this host leads, and campaigns again
when leadership is lost. The lock is held on a dedicated database
connection, checked every --keepalive.

  - Campaign: ormlock waits for the lock on the server, 30 s at a time,
    asking again at once, and retries after a connection error with a
    backoff of up to 5 s. The first contact must succeed within
    --connect-timeout (exit 70 otherwise); a refused login is exit 70.
  - Leadership lost (connection killed, failover): COMMAND and every process
    it started get SIGTERM, SIGKILL after --grace, exactly as in ormlock run;
    once none is left ormlock campaigns again, and runs COMMAND anew when
    elected.
  - Asked to step down (an operator's Act with ormlock.Resign, see
    docs/OPERATIONS.md): seen within one --keepalive (one renewal under
    --lease), then as a lost leadership: COMMAND's processes stop, the lock
    is released, and ormlock stays out of the election for the resign's
    cooldown (30 s by default) before it campaigns again.
  - COMMAND exiting by itself (or killed by a signal) ends ormlock lead: the
    lock is released and ormlock exits with COMMAND's status. If the lock
    turned out lost as COMMAND exited, the exit status is 77.
  - Signals (SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2) sent to
    ormlock are forwarded to COMMAND's process group while it runs, as in
    ormlock run: COMMAND's processes stop, the lock is released, and ormlock
    exits with COMMAND's status (143 for SIGTERM). While ormlock campaigns,
    a signal ends it at once: exit 128+n.
  - COMMAND's environment is as in ormlock run (ORMLOCK_KEY,
    ORMLOCK_NAMESPACE, no ORMLOCK_DSN without --export-dsn), plus, with
    --fencing, ORMLOCK_FENCING_TOKEN: the term's fencing token, greater than
    every earlier term's (needs the fence table: ormlock migrate).
  - --lease TTL makes each term a lease (ormlock.WithLease): a row of the
    lease table with an epoch, renewed every TTL/3, on no pinned
    connection, so it works behind PgBouncer in transaction mode and on a
    Galera cluster. ORMLOCK_FENCING_TOKEN is then always set: the term's
    epoch, with or without --fencing. Leadership is lost when a renewal
    fails past the lease's deadline or finds it taken over, before the
    server could grant the lease to another host; another host takes over
    within the TTL of a leader that died (kill -9, a lost host). A lease
    and a lock of the same KEY do not exclude each other. --keepalive does
    not apply.
  - --owner names this host (default hostname/pid); ormlock holder KEY
    shows it as owner= (PostgreSQL: the lock transaction's
    application_name; MySQL/MariaDB: a row of the owners table, the ledger
    table's name plus _owners, ormlock_runs_owners by default).

KEY reads as in ormlock run (a name, id:N, pair:C,O, name:X).

ormlock lead resign KEY (no --) asks KEY's current leader to step down
instead: see ormlock lead resign --help. A campaign for a key named
"resign" is ormlock lead resign -- COMMAND.

Exit statuses: COMMAND's own (128+n when signal n killed it); 2 usage error;
70 ormlock error (database unreachable at start, login refused); 77 lock
lost as COMMAND exited by itself; 126/127 COMMAND not executable/not found;
128+n ormlock got signal n while COMMAND was not running. See ormlock --help.

Examples:
  # one replica consumes the queue; another takes over within two
  # keepalives of its loss
  ormlock lead --dsn "$DSN" --keepalive 5s queue-consumer -- ./consume

  # leadership as a lease of 15 s: a dead leader is replaced within 15 s
  ormlock lead --lease 15s queue-consumer -- ./consume

  # the term's fencing token, for a resource that refuses older ones
  ormlock lead --fencing reconciler -- sh -c 'exec ./reconcile --token "$ORMLOCK_FENCING_TOKEN"'
`

func leadCmd(args []string, stdout, stderr io.Writer) error {
	if isResign(args) {
		return actCmd(actSpecs["lead resign"], args[1:], stdout, stderr)
	}
	var f runFlags
	f.tz, f.policy = "UTC", "latest" // --once-per's, not lead's: check passes them
	var fencing bool
	fs := newFlagSet("lead", leadUsage, stdout)
	f.register(fs, true) // the ledger table names the fence and owners tables
	f.registerCommand(fs)
	fs.fl.StringVar(&f.owner, "owner", "", "`ID` naming this host to ormlock holder while it leads (default hostname/pid)")
	fs.fl.BoolVar(&fencing, "fencing", false, "give each term a fencing token, in COMMAND's $ORMLOCK_FENCING_TOKEN (needs ormlock migrate)")

	pos, command, opts, err := f.parseCommandLine(fs, "lead", args)
	if err != nil {
		return err
	}
	if f.owner == "" {
		host, _ := os.Hostname()
		f.owner = host + "/" + strconv.Itoa(os.Getpid())
	}
	opts = append(append(opts, ormlock.WithKeepalive(f.keepalive), ormlock.WithOwner(f.owner)), f.leaseOptions()...)
	if fencing {
		opts = append(opts, ormlock.WithFencing())
	}
	if err := config.New(opts...).Err(); err != nil {
		return &usageError{msg: err.Error()}
	}
	key, err := parseKey(pos[0])
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	ch, db, env, done, err := f.prepare(ctx, pos[0], command, "while campaigning (COMMAND not running)", stderr)
	if err != nil {
		return err
	}
	defer done()
	err = gormlock.Lead(db.WithContext(ctx), key, func(ctx context.Context) error {
		err := ch.run(ctx, withToken(ctx, env))
		lost := errors.Is(context.Cause(ctx), ormlock.ErrLockLost)
		switch {
		case errors.Is(err, errStoppedLost), lost && !ch.ran:
			// Deposed (before COMMAND started, or COMMAND stopped):
			// Lead campaigns again once fn returns.
			if ch.ran {
				fmt.Fprintf(stderr, "ormlock: COMMAND %s; campaigning again for %q\n", ch.how(), pos[0])
			}
			ch.reset()
			return nil
		case lost:
			// COMMAND ended by itself as the loss was found: ormlock
			// ends (77, as ormlock run), Lead must not campaign again.
			cancel(context.Cause(ctx))
		}
		var cf *commandFailed
		if errors.As(err, &cf) {
			return nil // its status is ch's
		}
		return err
	}, opts...)
	return f.outcome(ch, err, stderr)
}
