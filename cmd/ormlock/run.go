package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/keys"
)

const runUsage = `Usage: ormlock run [flags] KEY [KEY...] -- COMMAND [ARGS...]

Takes the lock KEY, runs COMMAND while holding it, releases it when COMMAND
exits, and exits with COMMAND's status. Several KEYs are taken all or none
(ormlock.All: in one canonical order, so two runs with overlapping keys
never deadlock); --shared takes them in share mode (ormlock.Shared,
PostgreSQL only: any number of --shared runs at once, none while a run
without it holds the key); --max-holders N (1-128) lets up to N runs hold
KEY at once (ormlock.Semaphore, one KEY). The lock is held on a dedicated
database connection (gormlock.Session), checked every --keepalive.

  - Lock held elsewhere: COMMAND does not run; exit 75 (--conflict-exit-code).
    --wait DURATION waits for it instead of trying once.
  - Lock lost while COMMAND runs (connection killed, failover): COMMAND and
    every process it started get SIGTERM, SIGKILL after --grace; exit 77.
  - SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1 and SIGUSR2 sent to ormlock are
    forwarded to COMMAND's process group, never dropped; the lock is released
    only after COMMAND has exited. A signal that comes before COMMAND starts
    ends ormlock: exit 128+n.
  - COMMAND's children end with it: the processes it leaves running (in the
    background, under setsid or nohup, daemons) get SIGTERM when COMMAND
    exits, SIGKILL after --grace, and the lock is released only when none is
    left. If ormlock itself is killed (kill -9), they all get SIGKILL, as the
    database then frees the lock. (On Linux. On other Unix systems only the
    processes still in COMMAND's process group are found.)
  - At a terminal, COMMAND's process group is the foreground one and ormlock
    stays out of it: Ctrl-C, Ctrl-\ and Ctrl-Z reach COMMAND once, and the
    shell's fg and bg work.
  - stdin, stdout and stderr are COMMAND's own. Its environment is ormlock's
    without ORMLOCK_DSN (--export-dsn passes the DSN on; PG* variables and
    MYSQL_PWD stay, for jobs that run psql or mysql), plus ORMLOCK_KEY,
    ORMLOCK_NAMESPACE when set, and with --once-per ORMLOCK_JOB and
    ORMLOCK_SLOT (the slot in RFC 3339, UTC). With several KEYs,
    ORMLOCK_KEY holds them all as given, one per line, and ORMLOCK_KEYS
    their count.
  - --owner ID names the run while it holds the lock: ormlock holder KEY
    shows it as owner= (PostgreSQL: the lock transaction's
    application_name; MySQL/MariaDB: a row of the owners table, the ledger
    table's name plus _owners, ormlock_runs_owners by default, created on
    first use). With --once-per it is also the ledger's owner column.
  - --lease TTL takes KEY as a lease instead (ormlock.WithLease): a row of
    the lease table (--lease-table; ormlock migrate creates it) with an
    epoch, renewed every TTL/3 while COMMAND runs, on no connection held in
    between: it works behind PgBouncer in transaction mode and on a Galera
    cluster, where the server's locks are refused. COMMAND's
    $ORMLOCK_FENCING_TOKEN is the lease's epoch, greater than every earlier
    holder's of KEY. A renewal that fails past the lease's deadline, or
    finds it taken over, is a lost lock (exit 77, as above), reported before
    the server could grant KEY to anyone else. A lease and a lock of the
    same KEY do not exclude each other: a fleet uses one or the other.
    --keepalive does not apply.
  - A flag whose description names $ORMLOCK_X takes that variable's value
    when it is not given.

KEY is a lock name, as in the Go library (gormlock.Session(db, "KEY", ...)).
"id:N" names the numeric key N (ormlock.ID, pg_advisory_lock(N)),
"pair:C,O" the two-int key (ormlock.Pair), "name:X" the name X verbatim.

--once-per SCHEDULE runs COMMAND at most once per slot of SCHEDULE, KEY being
the job name (one KEY; --shared and --max-holders do not combine with it) (gormlock.RunOnce in claim mode, the same ledger): a run that
finds the slot done exits 76 (--done-exit-code) without running COMMAND; a
failed COMMAND marks the slot failed, and a later run for the same slot
retries it: from a crontab that fires once per slot, that is --catch-up on a
later firing (or a run by hand within the slot), not the next firing alone.
--catch-up DURATION first runs the slots missed within DURATION before now
(no 'done' row): the newest (--catch-up-policy latest) or each, oldest
first, stopping at a failure (all); ORMLOCK_SLOT names the slot each run is
for.
SCHEDULE is a cron expression ("0 3 * * *", "@daily") or a period ("1h",
"15m"), read in --tz (default UTC; every host must use the same). The ledger
table must exist: ormlock migrate.

Exit statuses: COMMAND's own (128+n when signal n killed it); 2 usage error;
70 ormlock error (database unreachable, query failed); 75 lock held
elsewhere; 76 slot already done; 77 lock lost; 126/127 COMMAND not
executable/not found. See ormlock --help.

Examples:
  # one host at a time runs the backup; the others exit 75 at once
  ormlock run --dsn "$DSN" backup -- /usr/local/bin/backup.sh --full

  # wait up to 10 minutes for the lock
  ormlock run --wait 10m migrate-schema -- ./migrate up

  # both accounts' locks, all or none; at most 4 exports at once
  ormlock run account:17 account:42 -- ./transfer 17 42
  ormlock run --max-holders 4 export -- ./export.sh

  # from cron on three hosts: the first one runs the nightly report,
  # the later ones exit 0 (--done-exit-code 0) without running it
  ORMLOCK_DSN=postgres://app@db/app ormlock run --once-per '0 2 * * *' \
      --tz Europe/Berlin --done-exit-code 0 --conflict-exit-code 0 \
      nightly-report -- ./report.sh

  # a lease of 30 s: nothing pinned while the backup runs, even on Galera
  ormlock run --lease 30s backup -- /usr/local/bin/backup.sh

  # behind PgBouncer in transaction mode: a DSN without
  # default_query_exec_mode gets simple_protocol, which PgBouncer needs
  ormlock run --dsn 'postgres://app@pgbouncer:6432/app' job -- ./job
`

type runFlags struct {
	common
	wait      time.Duration
	keepalive time.Duration
	grace     time.Duration
	conflict  int
	done      int
	oncePer   string
	tz        string
	catchUp   time.Duration // --catch-up: window of missed --once-per slots
	policy    string        // --catch-up-policy
	owner     string
	quiet     bool
	exportDSN bool
	lease     time.Duration // --lease: the lease's TTL (0: no lease)
	shared    bool          // run --shared
	holders   int           // run --max-holders
	holdersOn bool          // --max-holders given, whatever its value
	many      bool          // run: several KEYs
}

func runCmd(args []string, stdout, stderr io.Writer) error {
	var f runFlags
	fs := newFlagSet("run", runUsage, stdout)
	f.register(fs, true)
	f.registerCommand(fs)
	fs.fl.DurationVar(&f.wait, "wait", 0, "wait up to `DURATION` for the lock (default: try once)")
	fs.fl.IntVar(&f.conflict, "conflict-exit-code", exitConflict, "exit status `N` when the lock is held elsewhere")
	fs.fl.IntVar(&f.done, "done-exit-code", exitAlreadyDone, "exit status `N` when the --once-per slot is already done")
	fs.fl.StringVar(&f.oncePer, "once-per", "", "run at most once per slot of `SCHEDULE` (cron expression or period); KEY is the job name")
	fs.fl.StringVar(&f.tz, "tz", "UTC", "time `ZONE` of --once-per (IANA name, or Local)")
	fs.fl.DurationVar(&f.catchUp, "catch-up", 0, "with --once-per, first run the slots missed within `DURATION` before now (default: none)")
	fs.fl.StringVar(&f.policy, "catch-up-policy", "latest", "`POLICY` of --catch-up: latest (the newest missed slot) or all (each, oldest first)")
	fs.fl.StringVar(&f.owner, "owner", "", "`ID` naming this run to ormlock holder while it holds the lock, and in the ledger's owner column with --once-per (default: none to holder, hostname/pid in the ledger)")
	fs.fl.BoolVar(&f.quiet, "quiet", false, "print nothing when COMMAND does not run because of a conflict or a done slot")
	fs.fl.BoolVar(&f.shared, "shared", false, "take the KEYs in share mode (PostgreSQL): shared runs hold them together, exclusive ones wait")
	fs.fl.IntVar(&f.holders, "max-holders", 0, "let up to `N` runs hold KEY at once, N 1-128 (a semaphore of N slots; one KEY)")
	f.many = true

	pos, command, opts, err := f.parseCommandLine(fs, "run", args)
	if err != nil {
		return err
	}
	opts = append(append(opts, ormlock.WithKeepalive(f.keepalive), ormlock.WithWait(f.wait)), f.leaseOptions()...)
	if f.owner != "" {
		// on MySQL/MariaDB the Session writes the owner row a Lead
		// writes, where ormlock holder finds it
		opts = append(opts, ormlock.WithOwner(f.owner), func(c *config.Config) { c.OwnerRow = true })
	}
	if err := config.New(opts...).Err(); err != nil {
		return &usageError{msg: err.Error()}
	}

	var (
		key   ormlock.Key
		sched ormlock.Schedule
	)
	if f.oncePer != "" {
		if sched, err = parseSchedule(f.oncePer, f.tz); err != nil {
			return err
		}
	} else if key, err = f.shape(pos); err != nil {
		return err
	}
	ch, db, env, done, err := f.prepare(context.Background(), strings.Join(pos, "\n"), command, "", stderr)
	if err != nil {
		return err
	}
	defer done()
	if len(pos) > 1 {
		env = append(env, "ORMLOCK_KEYS="+strconv.Itoa(len(pos)))
	}
	if sched == nil {
		err = gormlock.Session(db, key, func(ctx context.Context) error {
			err := ch.run(ctx, withToken(ctx, env))
			var cf *commandFailed
			if errors.As(err, &cf) || errors.Is(err, errStoppedLost) {
				return nil // no ledger to tell; Session reports a loss itself
			}
			return err
		}, opts...)
		return f.outcome(ch, err, stderr)
	}
	// the slot of now and, with --catch-up, the missed ones first: each run
	// exports its own slot
	env = append(env, "ORMLOCK_JOB="+pos[0])
	err = gormlock.RunScheduled(db, pos[0], sched, func(tx *gorm.DB) error {
		slot, _ := ormlock.Slot(tx.Statement.Context)
		return ch.run(tx.Statement.Context, withToken(tx.Statement.Context, append(env[:len(env):len(env)], "ORMLOCK_SLOT="+slot.UTC().Format(time.RFC3339Nano))))
	}, append(append(opts, f.catchUpOptions()...), ormlock.WithClaim())...)
	return f.outcome(ch, err, stderr)
}

// prepare readies COMMAND for ormlock run and ormlock lead: it finds it,
// forwards ormlock's signals to it from now on (idle says when a signal ends
// ormlock instead, "" before COMMAND started), and opens the database. It
// returns COMMAND, the pool (on ctx), COMMAND's environment and what undoes
// this; its error is ormlock's exit.
func (f *runFlags) prepare(ctx context.Context, key string, command []string, idle string, stderr io.Writer) (*child, *gorm.DB, []string, func(), error) {
	path, err := exec.LookPath(command[0])
	if err != nil {
		return nil, nil, nil, nil, startError(command[0], err)
	}
	ch := &child{path: path, argv: command, grace: f.grace, stderr: stderr, idle: idle}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwarded...)
	go func() {
		for s := range sigs {
			ch.signal(s)
		}
	}()
	db, closeDB, err := f.open(ctx)
	if err != nil {
		signal.Stop(sigs)
		return nil, nil, nil, nil, f.outcome(ch, err, stderr)
	}
	exported := ""
	if f.exportDSN {
		exported = f.dsn
	}
	return ch, db, commandEnv(key, f.namespace, exported), func() { closeDB(); signal.Stop(sigs) }, nil
}

// registerCommand registers the flags of COMMAND's lock and processes,
// which ormlock run and ormlock lead share.
func (f *runFlags) registerCommand(fs *flagSet) {
	fs.fl.DurationVar(&f.keepalive, "keepalive", config.DefaultKeepalive, "check the lock connection every `DURATION`; a loss is seen within two")
	fs.fl.DurationVar(&f.lease, "lease", 0, "take the lock as a lease of time to live `TTL` (1s-24h; ormlock.WithLease), renewed every TTL/3, on no pinned connection (default: the server's lock)")
	fs.fl.DurationVar(&f.grace, "grace", 10*time.Second, "wait `DURATION` between SIGTERM and SIGKILL to COMMAND's processes (lock lost, or COMMAND exited before them)")
	fs.fl.BoolVar(&f.exportDSN, "export-dsn", false, "pass the DSN on to COMMAND as $ORMLOCK_DSN (by default COMMAND's environment has none)")
}

// parseCommandLine parses "[flags] KEY -- COMMAND [ARGS...]" of the
// command name, checks the flags, and returns KEY (pos[0]), COMMAND and the
// options of the common flags.
func (f *runFlags) parseCommandLine(fs *flagSet, name string, args []string) (pos, command []string, opts []ormlock.Option, err error) {
	left, command, sep := splitCommand(args)
	if pos, err = parseFlags(fs, left); err != nil {
		return nil, nil, nil, err
	}
	fs.fl.Visit(func(fl *flag.Flag) { f.holdersOn = f.holdersOn || fl.Name == "max-holders" })
	switch {
	case len(pos) == 0:
		return nil, nil, nil, usagef("missing KEY: ormlock %s [flags] KEY -- COMMAND [ARGS...]", name)
	case !sep:
		return nil, nil, nil, usagef("missing -- between KEY and COMMAND: ormlock %s [flags] KEY -- COMMAND [ARGS...]", name)
	case len(pos) > 1 && !f.many:
		return nil, nil, nil, usagef("one KEY before --, got %d arguments: %q", len(pos), pos)
	case len(pos) > 1 && f.oncePer != "":
		return nil, nil, nil, usagef("--once-per takes one KEY, the job name, got %d: %q", len(pos), pos)
	case len(command) == 0:
		return nil, nil, nil, usagef("missing COMMAND after --")
	}
	if err := f.check(); err != nil {
		return nil, nil, nil, err
	}
	opts, err = f.options()
	return pos, command, opts, err
}

// check validates the flags that the library does not.
func (f *runFlags) check() error {
	for _, c := range []struct {
		name string
		v    int
	}{{"--conflict-exit-code", f.conflict}, {"--done-exit-code", f.done}} {
		if c.v < 0 || c.v > 255 {
			return usagef("%s must be 0-255, got %d", c.name, c.v)
		}
	}
	if f.grace <= 0 {
		return usagef("--grace must be positive, got %v", f.grace)
	}
	if f.wait < 0 {
		return usagef("--wait must not be negative, got %v", f.wait)
	}
	if f.keepalive < config.MinKeepalive {
		return usagef("--keepalive must be at least %v, got %v", config.MinKeepalive, f.keepalive)
	}
	if f.oncePer == "" && f.tz != "UTC" {
		return usagef("--tz is the time zone of --once-per; give --once-per too")
	}
	if f.catchUp < 0 {
		return usagef("--catch-up must not be negative, got %v", f.catchUp)
	}
	if f.oncePer == "" && f.catchUp > 0 {
		return usagef("--catch-up catches up missed slots of --once-per; give --once-per too")
	}
	if (f.holdersOn || f.holders != 0) && (f.holders < 1 || f.holders > keys.MaxSemaphore) {
		// 0 too: a semaphore of no slot is no exclusive lock
		return usagef("--max-holders must be 1-%d, got %d (without --max-holders, one run holds KEY at a time)", keys.MaxSemaphore, f.holders)
	}
	if f.oncePer != "" && (f.shared || f.holders > 0) {
		return usagef("--once-per runs one job per slot: --shared and --max-holders do not combine with it")
	}
	if f.shared && f.holders > 0 {
		return usagef("--shared and --max-holders do not combine: a semaphore's slots are exclusive")
	}
	if f.policy != "latest" && f.policy != "all" {
		return usagef("--catch-up-policy must be latest or all, got %q", f.policy)
	}
	if f.lease < 0 {
		return usagef("--lease must be a TTL of 1s to 24h, got %v", f.lease)
	}
	return nil
}

// leaseOptions returns the option of --lease, if given.
func (f *runFlags) leaseOptions() []ormlock.Option {
	if f.lease == 0 {
		return nil
	}
	return []ormlock.Option{ormlock.WithLease(f.lease)}
}

// catchUpOptions returns the option of --catch-up and --catch-up-policy.
func (f *runFlags) catchUpOptions() []ormlock.Option {
	if f.catchUp == 0 {
		return nil
	}
	policy := ormlock.CatchUpLatest
	if f.policy == "all" {
		policy = ormlock.CatchUpAll
	}
	return []ormlock.Option{ormlock.WithCatchUp(f.catchUp, policy)}
}

// outcome maps the verb's result to ormlock's exit status and message.
func (f *runFlags) outcome(ch *child, err error, stderr io.Writer) error {
	if ch.ran {
		switch {
		case errors.Is(err, ormlock.ErrLockLost):
			// Session joins the loss with run's own error: the first
			// line says it all.
			msg, _, _ := strings.Cut(err.Error(), "\n")
			return &exitCode{code: exitLockLost, err: fmt.Errorf("%s; COMMAND %s", msg, ch.how())}
		case err == nil:
		case errors.As(err, new(*commandFailed)):
		case ch.status != 0:
			// The ledger could not record the failure; COMMAND's
			// status says more.
			fmt.Fprintf(stderr, "ormlock: %v\n", dbError(err))
		default:
			return dbError(err)
		}
		return &exitCode{code: ch.status}
	}
	var quietErr = func(code int, err error) error {
		if f.quiet {
			err = nil
		}
		return &exitCode{code: code, err: err}
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ormlock.ErrAlreadyDone):
		return quietErr(f.done, fmt.Errorf("%w; COMMAND not run", err))
	case errors.Is(err, ormlock.ErrLockLost):
		return &exitCode{code: exitLockLost, err: fmt.Errorf("%w; COMMAND not run", err)}
	case errors.Is(err, ormlock.ErrNotAcquired):
		return quietErr(f.conflict, fmt.Errorf("%w; COMMAND not run", err))
	case errors.Is(err, ormlock.ErrInvalidKey), errors.Is(err, ormlock.ErrInvalidArgument):
		return &usageError{msg: err.Error()}
	}
	return dbError(err)
}

// commandEnv is COMMAND's environment: ormlock's own without $ORMLOCK_DSN
// (a job that logs its environment must not leak the password), plus the
// lock's name, and the DSN only when dsn is not empty (--export-dsn).
// PG* and MYSQL_PWD stay: jobs that run psql or mysql need them. (ormlock
// lead --fencing adds each term's token as ORMLOCK_FENCING_TOKEN.)
func commandEnv(key, ns, dsn string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ORMLOCK_DSN=") {
			env = append(env, kv)
		}
	}
	env = append(env, "ORMLOCK_KEY="+key)
	if ns != "" {
		env = append(env, "ORMLOCK_NAMESPACE="+ns)
	}
	if dsn != "" {
		env = append(env, "ORMLOCK_DSN="+dsn)
	}
	return env
}

// splitCommand splits args at the first "--": ormlock's flags and KEY
// before it, COMMAND after it.
func splitCommand(args []string) (left, command []string, sep bool) {
	for i, a := range args {
		if a == "--" {
			return args[:i], args[i+1:], true
		}
	}
	return args, nil, false
}

// shape is the key of ormlock run's KEYs: the one key, or all of them
// (ormlock.All), shared with --shared, a semaphore with --max-holders.
func (f *runFlags) shape(pos []string) (ormlock.Key, error) {
	ks := make([]ormlock.Key, len(pos))
	for i, p := range pos {
		k, err := parseKey(p)
		if err != nil {
			return k, err
		}
		ks[i] = k
	}
	key := ks[0]
	if len(ks) > 1 {
		if f.holders > 0 {
			return key, usagef("--max-holders takes one KEY, got %d: %q", len(ks), pos)
		}
		key = ormlock.All(ks...)
	}
	switch {
	case f.shared:
		key = ormlock.Shared(key)
	case f.holders > 0:
		key = ormlock.Semaphore(key, f.holders)
	}
	if err := key.Validate(); err != nil {
		return key, usagef("bad KEYs %q: %s", pos, bare(err))
	}
	return key, nil
}

// parseKey reads KEY: a name, "id:N", "pair:C,O" or "name:X".
func parseKey(s string) (ormlock.Key, error) {
	var k ormlock.Key
	switch {
	case strings.HasPrefix(s, "name:"):
		k = ormlock.Name(strings.TrimPrefix(s, "name:"))
	case strings.HasPrefix(s, "id:"):
		id, err := strconv.ParseInt(strings.TrimPrefix(s, "id:"), 10, 64)
		if err != nil {
			return k, usagef("bad KEY %q: id:N takes a 64-bit integer", s)
		}
		k = ormlock.ID(id)
	case strings.HasPrefix(s, "pair:"):
		c, o, ok := strings.Cut(strings.TrimPrefix(s, "pair:"), ",")
		cl, err1 := strconv.ParseInt(c, 10, 32)
		ob, err2 := strconv.ParseInt(o, 10, 32)
		if !ok || err1 != nil || err2 != nil {
			return k, usagef("bad KEY %q: pair:C,O takes two 32-bit integers", s)
		}
		k = ormlock.Pair(int32(cl), int32(ob))
	default:
		k = ormlock.Name(s)
	}
	if err := k.Validate(); err != nil {
		return k, usagef("bad KEY %q: %s", s, bare(err))
	}
	return k, nil
}

// parseSchedule reads --once-per: a Go duration (ormlock.Every) or a cron
// expression (ormlock.Cron), in zone tz.
func parseSchedule(s, tz string) (ormlock.Schedule, error) {
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, usagef("--tz: unknown time zone %q: %v", tz, err)
	}
	var sched ormlock.Schedule
	if d, derr := time.ParseDuration(s); derr == nil {
		sched, err = ormlock.Every(d, loc)
	} else {
		sched, err = ormlock.Cron(s, loc)
	}
	if err != nil {
		return nil, usagef("--once-per %q: %s", s, bare(err))
	}
	return sched, nil
}
