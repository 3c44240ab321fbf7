package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/apiv1"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/keyhash"
)

const holderUsage = `Usage: ormlock holder [flags] KEY

Shows who holds the lock KEY right now, as gormlock.Holder reports it: the
holder's backend pid (PostgreSQL) or connection id (MySQL/MariaDB), what
pg_terminate_backend and KILL take, its user, owner, client and state (not
its query, which may carry secrets); or "free". KEY reads as in ormlock run (a name, id:N, pair:C,O).

owner= is what the holder named itself: ormlock run --owner, ormlock lead
--owner, or WithOwner in the Go library. On PostgreSQL it is the holder's
application_name (printed once), for a Transaction the connection's own;
on MySQL/MariaDB it is recorded by ormlock run --owner, ormlock lead and
Lead only, in the owners table beside --ledger-table (docs/PROTOCOL.md,
The owner).

A job run with ormlock run --once-per (or gormlock.RunOnce) holds the lock of
its run, (JOB, slot), not JOB's own: when KEY is free, holder reads the
ledger (--ledger-table) for runs of the job KEY that are still running and
shows the holder of each such run's lock, with run=SLOT in front. A running
row whose lock nobody holds is stale: its owner died or lost the lock before
recording the end. A later trigger of that same slot takes it over (a
--catch-up run, ormlock run --once-per again within the slot); a schedule
that never fires that slot again leaves it until gormlock.Prune deletes it.

Examples:
  ormlock holder --dsn "$DSN" backup
  # held pid=4242 user=app client=10.0.0.7:51234 database=app state="idle in transaction" state_for=1.2s held_for=1.3s waiters=0
  ormlock holder --dsn "$DSN" nightly-report     # a --once-per job
  # run=2026-12-01T02:00:00Z held pid=4243 user=app owner=host-a ...

With --max-holders N, KEY is a semaphore of N slots (ormlock run
--max-holders N KEY): holder prints the holder of each held slot, one line
each (slot=S), or "free" when none is.

Leases (ormlock run --lease, ormlock lead --lease, WithLease): a lease is a
row of the lease table (--lease-table), not a lock of the server, and a
lease and a lock of the same KEY are different locks. Without --lease,
holder shows the server's lock and, when that is free, KEY's live lease;
with --lease, the lease only. A lease prints no pid (no connection holds
it) but its epoch (its fencing token), owner, mode and time left, by the
server's clock:
  # held lease epoch=42 owner=host-a/4242 mode=exclusive held_for=1m2.5s expires_in=21.3s

A free lock prints "free", and stderr says which namespace was looked in:
a lock taken under another namespace (--namespace, $ORMLOCK_NAMESPACE) is
another lock.

--json prints {"holders": [...]} instead, one entry per line above (a free
key's entry has "held": false; a --once-per run's has its "run_slot"), with
the JSON API's field names (docs/OPERATIONS.md, API): durations in
milliseconds, times RFC 3339 in UTC, ASCII only.
`

// holderRuns is how many of a job's latest runs holder reads for running
// ones.
const holderRuns = 20

func holderCmd(args []string, stdout, stderr io.Writer) error {
	var c common
	fs := newFlagSet("holder", holderUsage, stdout)
	c.register(fs, true) // on MySQL/MariaDB the owners table is the ledger's
	maxHolders := fs.fl.Int("max-holders", 0, "KEY is a semaphore of `N` slots (ormlock run --max-holders N): list the holder of each held slot")
	lease := fs.fl.Bool("lease", false, "KEY is a lease (ormlock run --lease, WithLease): read the lease table only")
	asJSON := fs.fl.Bool("json", false, "print the holders as JSON (the API's field names: docs/OPERATIONS.md, API)")
	arg, key, err := parseKeyArg(fs, args, "KEY")
	if err != nil {
		return err
	}
	if *maxHolders != 0 && (*maxHolders < 1 || *maxHolders > keys.MaxSemaphore) {
		return usagef("--max-holders must be 1-%d, got %d", keys.MaxSemaphore, *maxHolders)
	}
	opts, err := c.options()
	if err != nil {
		return err
	}
	if *lease {
		opts = append(opts, ormlock.WithLease(0)) // the TTL is the holder's
	}
	out := &holderOut{json: *asJSON, key: key.String(), w: stdout, list: apiv1.HolderList{Holders: []apiv1.Holder{}}}
	if *maxHolders > 0 {
		return withDB(&c, func(db *gorm.DB) error {
			return out.flush(semaphoreHolders(db, arg, key, *maxHolders, &c, opts, out, stderr))
		})
	}
	return withDB(&c, func(db *gorm.DB) error { return out.flush(holderOf(db, arg, key, &c, opts, out, stderr)) })
}

// holderOf prints the holder of key (arg as given), or of its --once-per
// runs.
func holderOf(db *gorm.DB, arg string, key ormlock.Key, c *common, opts []ormlock.Option, out *holderOut, stderr io.Writer) error {
	h, err := gormlock.Holder(db, key, opts...)
	if err != nil {
		return err
	}
	if h.Held || !keys.IsName(keys.Key(key)) {
		out.add(h, time.Time{})
		if !h.Held {
			fmt.Fprintf(stderr, "ormlock: %q is free %s\n", arg, c.where())
		}
		return nil
	}
	// A --once-per job: the lock is its run's.
	found, stale, ledgerErr, err := c.runHolders(db, arg, opts, out)
	if err != nil || found {
		return err
	}
	out.add(h, time.Time{})
	if ledgerErr != nil {
		// The ledger is a second place to look, not what was asked.
		fmt.Fprintf(stderr, "ormlock: %q is free %s; ledger table %s was not read, so a --once-per run of it would not show: %s\n", arg, c.where(), c.ledger, bare(ledgerErr))
		return nil
	}
	fmt.Fprintf(stderr, "ormlock: %q is free %s, and ledger table %s has no run of it holding its lock (ormlock run --once-per)\n", arg, c.where(), c.ledger)
	for _, r := range stale {
		fmt.Fprintf(stderr, "ormlock: the run of slot %s is recorded running (owner %s, started %s) but nobody holds its lock: stale, its owner died or lost the lock before recording the end; "+
			"a later trigger of that slot (--catch-up, a retry within the slot) takes it over, and gormlock.Prune deletes it once older than its window\n",
			r.Slot.UTC().Format(time.RFC3339), quoteField(r.Owner), r.Started.UTC().Format(time.RFC3339))
	}
	return nil
}

// holderOut prints holders: a line each (HolderInfo.String), or with
// --json one apiv1.HolderList when flushed.
type holderOut struct {
	json bool
	key  string // the key's text, for JSON
	w    io.Writer
	list apiv1.HolderList
}

// add prints h, the holder of the run of slot run when run is not zero.
func (o *holderOut) add(h ormlock.HolderInfo, run time.Time) {
	switch {
	case o.json:
		j := apiv1.HolderOf(o.key, h)
		if !run.IsZero() {
			r := run.UTC()
			j.RunSlot = &r
		}
		o.list.Holders = append(o.list.Holders, j)
	case run.IsZero():
		fmt.Fprintln(o.w, h.String())
	default:
		fmt.Fprintf(o.w, "run=%s %s\n", run.UTC().Format(time.RFC3339Nano), h.String())
	}
}

// flush writes the JSON list, unless err.
func (o *holderOut) flush(err error) error {
	if err != nil || !o.json {
		return err
	}
	return apiv1.Encode(o.w, o.list, true)
}

// semaphoreHolders prints the holder of each held slot of the semaphore of
// n slots on key, or "free" when none is held.
func semaphoreHolders(db *gorm.DB, arg string, key ormlock.Key, n int, c *common, opts []ormlock.Option, out *holderOut, stderr io.Writer) error {
	hs, err := gormlock.Holders(db, ormlock.Semaphore(key, n), opts...)
	if err != nil {
		return err
	}
	for _, h := range hs {
		out.add(h, time.Time{})
	}
	if len(hs) == 0 {
		out.add(ormlock.HolderInfo{}, time.Time{})
		fmt.Fprintf(stderr, "ormlock: no slot of the semaphore %q (%d slots) is held %s\n", arg, n, c.where())
	}
	return nil
}

// runHolders prints the holder of each of job's runs that the ledger shows
// running and whose lock is held, as "run=SLOT <holder>", and reports
// whether there was one; stale are the running rows whose lock is free
// (Run.Stale). A
// missing ledger table is no runs; ledgerErr is why the ledger could not
// be read otherwise (no database selected, no privilege), and err the
// failure of a holder lookup.
func (c *common) runHolders(db *gorm.DB, job string, opts []ormlock.Option, out *holderOut) (found bool, stale []ormlock.Run, ledgerErr, err error) {
	runs, rerr := gormlock.Runs(db, job, holderRuns, opts...)
	switch {
	case errors.Is(rerr, ormlock.ErrInvalidArgument) || isMissingTable(rerr):
		return false, nil, nil, nil // not a job name the ledger can hold, or no ledger
	case rerr != nil:
		return false, nil, rerr, nil
	}
	for _, r := range runs {
		if r.Stale {
			stale = append(stale, r)
		}
		if r.Status != "running" || r.Stale {
			continue
		}
		h, err := gormlock.Holder(db, ormlock.RunKey(job, r.Slot), opts...)
		if err != nil {
			return false, nil, nil, err
		}
		if !h.Held { // it ended after Runs read it
			continue
		}
		found = true
		out.add(h, r.Slot)
	}
	return found, stale, nil, nil
}

// quoteField is v as HolderInfo.String prints a value: as it is when plain,
// else quoted.
func quoteField(v string) string {
	if v == "" || strings.ContainsFunc(v, func(r rune) bool { return r <= ' ' || r == '"' || r == '=' || r == '\\' || r > '~' }) {
		return strconv.Quote(v)
	}
	return v
}

const runsUsage = `Usage: ormlock runs [flags] JOB

Shows the last runs of JOB from the ledger (gormlock.Runs): the runs of
ormlock run --once-per and of gormlock.RunOnce / entlock.RunOnce, newest slot
first, with their status (running, done, failed, or stale: recorded running
but nobody holds its lock, so its owner died or lost the lock before recording
the end), owner, start, duration and error. A run of ormlock run --once-per
--lease that holds its live lease shows "running (lease)"; once its lease has
expired without the end recorded, it is stale.

--json prints {"job": ..., "runs": [...]} instead, with the JSON API's
field names (docs/OPERATIONS.md, API): "status" is the ledger's (running,
done, failed, skipped, rerun) and "stale" says whether a running run's lock
was found free.

Examples:
  ormlock runs --dsn "$DSN" nightly-report
  ormlock runs --limit 30 --ledger-table billing_runs nightly-report
  ormlock runs --json nightly-report | jq -r '.runs[] | select(.status == "failed") | .slot'
`

func runsCmd(args []string, stdout, stderr io.Writer) error {
	var c common
	fs := newFlagSet("runs", runsUsage, stdout)
	c.register(fs, true)
	limit := fs.fl.Int("limit", 10, "show at most `N` runs")
	asJSON := fs.fl.Bool("json", false, "print the runs as JSON (the API's field names: docs/OPERATIONS.md, API)")
	job, err := parseOneArg(fs, args, "JOB")
	if err != nil {
		return err
	}
	if *limit < 1 {
		return usagef("--limit must be positive, got %d", *limit)
	}
	opts, err := c.options()
	if err != nil {
		return err
	}
	return withDB(&c, func(db *gorm.DB) error {
		runs, err := gormlock.Runs(db, job, *limit, opts...)
		if err != nil {
			return err
		}
		if len(runs) == 0 {
			fmt.Fprintf(stderr, "ormlock: no runs of %q in ledger table %s %s\n", job, c.ledger, c.where())
		}
		if *asJSON {
			return apiv1.Encode(stdout, apiv1.RunList{Job: job, Runs: apiv1.RunsOf(runs)}, true)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SLOT\tSTATUS\tOWNER\tSTARTED\tDURATION\tERROR")
		for _, r := range runs {
			dur, status := "-", r.Status
			if r.Status != "running" {
				dur = r.Duration.Round(time.Millisecond).String()
			}
			if r.Stale {
				status = "stale"
			} else if r.Mechanism == "lease" {
				status += " (lease)" // a --lease run: its lease is live
			}
			errText := strings.Join(strings.Fields(r.Error), " ")
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Slot.UTC().Format(time.RFC3339), status, r.Owner,
				r.Started.UTC().Format(time.RFC3339), dur, errText)
		}
		return tw.Flush()
	})
}

const keyUsage = `Usage: ormlock key [--namespace NS] NAME

Shows the keys NAME maps to on each server (keyhash spec v1), without
connecting: the PostgreSQL bigint and where pg_locks shows it, the
keyhash.Pair form, the MySQL/MariaDB GET_LOCK name, and the psql expression
that computes the bigint. NAME reads as KEY in ormlock run (id:N and
pair:C,O show their own forms).

Examples:
  ormlock key daily-settlement
  ormlock key --namespace billing daily-settlement
  psql -c "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND classid = C AND objid = O"
`

func keyCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("key", keyUsage, stdout)
	ns := fs.fl.String("namespace", "", "key namespace (`NS`), as ormlock.WithNamespace")
	fs.env("namespace", "ORMLOCK_NAMESPACE")
	_, key, err := parseKeyArg(fs, args, "NAME")
	if err != nil {
		return err
	}
	if err := config.New(ormlock.WithNamespace(*ns)).Err(); err != nil {
		return usagef("--namespace: %s", bare(err))
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	pg := keys.Postgres(keys.Key(key), *ns)
	if pg.IsPair {
		fmt.Fprintf(tw, "postgres\tpg_advisory_lock(%d, %d)\n", pg.ClassID, pg.ObjID)
		fmt.Fprintf(tw, "pg_locks\tclassid=%d objid=%d objsubid=2\n", uint32(pg.ClassID), uint32(pg.ObjID))
	} else {
		fmt.Fprintf(tw, "int64\t%d\n", pg.Int64)
		fmt.Fprintf(tw, "pg_locks\tclassid=%d objid=%d objsubid=1\n", uint32(uint64(pg.Int64)>>32), uint32(pg.Int64))
	}
	if keys.IsName(keys.Key(key)) {
		name := keys.NameValue(keys.Key(key))
		cl, ob := keyhash.Pair(*ns, name)
		fmt.Fprintf(tw, "pair\t%d,%d\t(keyhash.Pair: the key of ormlock.Pair(%d, %d), a separate lock space)\n", cl, ob, cl, ob)
	}
	fmt.Fprintf(tw, "mysql\t%s\n", keys.MySQL(keys.Key(key), *ns))
	if keys.IsName(keys.Key(key)) {
		fmt.Fprintf(tw, "psql\t%s\n", psqlExpr(*ns, keys.NameValue(keys.Key(key))))
	}
	return nil
}

// psqlExpr is the SQL that computes keyhash.Int64NS(ns, name) on
// PostgreSQL 11+.
func psqlExpr(ns, name string) string {
	lit := func(s string) string { return "convert_to('" + strings.ReplaceAll(s, "'", "''") + "', 'UTF8')" }
	bytes := lit(name)
	if ns != "" {
		bytes = lit(ns) + " || '\\x00'::bytea || " + bytes
	}
	return "SELECT ('x' || left(encode(sha256(" + bytes + "), 'hex'), 16))::bit(64)::bigint;"
}

const migrateUsage = `Usage: ormlock migrate [flags]

Creates the ledger table of ormlock run --once-per (and of gormlock.RunOnce),
its fencing counters' table and the lease table of --lease (ormlock.WithLease)
if they do not exist: gormlock.Migrate. Harmless to run again, and safe to
run from several hosts at once.

--print prints the CREATE statements instead (ormlock.MigrateSQL), one per
line group, each ending with ";", for teams that run their own migrations:
for --dialect (postgres, or mysql for MySQL and MariaDB), or else for the
dialect of --dsn, read from the DSN alone. It never connects.

Examples:
  ormlock migrate --dsn "$DSN"
  ormlock migrate --ledger-table billing_runs --lease-table billing_leases
  ormlock migrate --print --dialect mysql > 0042_ormlock.sql
`

func migrateCmd(args []string, stdout, stderr io.Writer) error {
	var c common
	fs := newFlagSet("migrate", migrateUsage, stdout)
	c.register(fs, true)
	print := fs.fl.Bool("print", false, "print the CREATE statements instead of running them (never connects)")
	dialect := fs.fl.String("dialect", "", "with --print, the `DIALECT` to print for: postgres or mysql (default: the DSN's)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("migrate takes no arguments, got %q", pos)
	}
	if *dialect != "" && !*print {
		return usagef("--dialect is the dialect of --print; give --print too")
	}
	opts, err := c.options()
	if err != nil {
		return err
	}
	if *print {
		return printMigration(&c, *dialect, opts, stdout)
	}
	return withDB(&c, func(db *gorm.DB) error {
		if err := gormlock.Migrate(db, opts...); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "ledger table %s and lease table %s are ready\n", c.ledger, c.leases)
		return nil
	})
}

// withDB opens the database for a short command, cancelled by SIGINT or
// SIGTERM, and runs f.
func withDB(c *common, f func(db *gorm.DB) error) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	db, closeDB, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer closeDB()
	err = f(db)
	if errors.Is(err, ormlock.ErrInvalidKey) || errors.Is(err, ormlock.ErrInvalidArgument) {
		return &usageError{msg: err.Error()}
	}
	return dbError(err)
}
