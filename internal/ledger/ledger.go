// Package ledger is the RunOnce job ledger, written once for the four
// adapters (gormlock, entlock, sqllock, pgxlock): the ledger table's SQL per
// dialect (create, claim, finish, read) and the RunOnce flows on top of the
// lock protocol. It works on database/sql values (a lockproto.Querier,
// *sql.DB) and a lockproto.Dialect, never on an ORM's types; lock SQL stays
// in lockproto.
//
// What differs per server is in postgres.go and mysql.go, the two
// implementations of ledgerServer (server.go), which NewTable picks once
// from the dialect's lockproto.Server; the table (table.go), the claim
// (claim.go), the reads (reads.go), the catch-up, Prune, the stale rows and
// the upgrades call it and never branch on the dialect. The operators'
// controls (controls.go: the pause flag the claim reads, pause.go; the
// actions, act.go; the schedule and the reruns of RunScheduled,
// schedule.go) have their SQL in ctlpostgres.go and ctlmysql.go, behind
// ctlServer, and their methods on Ctl.
//
// # The table
//
// One row per (namespace, job, slot), the primary key:
//
//	namespace    varchar(128)   ormlock.WithNamespace, '' for none (utf8mb4_bin)
//	job          varchar(191)   the job name (utf8mb4_bin on MySQL: exact match)
//	slot         timestamptz / DATETIME(6) in UTC
//	status       'running', 'done', 'failed', 'skipped' or 'rerun' (the
//	             operators', controls.go)
//	owner        varchar(255)   the instance (ormlock.WithOwner)
//	started_at   timestamptz / DATETIME(6) in UTC, the server's clock
//	finished_at  timestamptz / DATETIME(6) in UTC, NULL while running
//	error        text           a failed claim-mode run's error, else NULL
//
// The namespace is part of a run's identity, as it is of the run's lock
// (keys.RunKey in that namespace): services sharing a database and a
// ledger table under different namespaces each run their own job of the same
// name. Tables created before the namespace column existed, with primary key
// (job, slot), are upgraded in place by Migrate (upgrade.go); their rows get
// the empty namespace.
//
// An index on (namespace, slot) (Table.IndexName) serves Prune, whose
// predicate the primary key does not: without it each batch reads the whole
// namespace. Migrate creates it with the table, and adds it to a table
// created before it existed (index.go).
//
// Times come from the database server's clock (clock_timestamp(),
// UTC_TIMESTAMP(6)), so the audit trail of all instances shares one clock.
// MySQL DATETIME values are written and read as text in UTC, so neither the
// session time_zone nor the driver's loc/parseTime settings can shift them.
//
// # Claiming a slot
//
// Both modes claim the slot with one statement that never raises a
// duplicate-key error: it inserts a 'running' row, or takes over an existing
// row that is not 'done' or 'skipped' (a claim-mode run that failed, or
// whose owner died, or a slot an operator asked to rerun; safe because the
// caller holds the (job, slot) lock), and leaves a 'done' or 'skipped' row
// untouched (ErrAlreadyDone). Where the ledger has its controls table, the
// same statement reads the job's pause flag (pause.go, controls.go).
//
//   - PostgreSQL: INSERT ... ON CONFLICT (namespace, job, slot) DO UPDATE
//     ... WHERE status <> 'done' RETURNING started_at. A row comes back exactly when the
//     slot was claimed; on a 'done' row it acts as ON CONFLICT DO NOTHING
//     (nothing written, no error, no row, RowsAffected 0).
//   - MySQL/MariaDB: INSERT ... ON DUPLICATE KEY UPDATE col = IF(status =
//     'done', col, new value), ... rather than INSERT IGNORE, which would also
//     turn other errors (a value too long, a NULL in a NOT NULL column, a
//     CHECK failure) into warnings and insert something else than asked.
//     RowsAffected is 1 for an insert, 2 for a take-over and 0 for a 'done'
//     row, except that with the driver's clientFoundRows=true a 'done' row
//     also reports 1; so any non-zero count is confirmed by reading the row
//     back (its status is then 'running' with this owner, or 'done').
//
// In the transactional mode on PostgreSQL with pgx, the claim travels in
// the message that begins the transaction and takes the lock, after the
// lock's statement (claimText: literals only, lockproto.Op.SetThen), and
// the mark done in the message that commits (doneText,
// lockproto.CommitWith): the run costs the round trips of the plain
// transaction (docs/PROTOCOL.md, RunOnce).
//
// After fn the row is marked 'done' (or, in claim mode, 'failed' with the
// error text) by an UPDATE that matches only this claim (status 'running',
// this owner and started_at), so a run that lost its lock can never
// overwrite the row of an instance that took over.
//
// # Stale rows
//
// A 'running' row whose run's (job, slot) lock nobody holds is stale: its
// owner died or lost the lock before it recorded the end (stale.go says
// why, and in which order the row and the lock are read so that a run that
// recorded its end and then released its lock is never taken for one).
// Runs reports it (Row.Stale, Table.MarkStale), Prune deletes it once its
// slot is older than its window (prune.go), and a later claim of the slot
// takes it over as above; nothing writes 'stale' into the table.
package ledger

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/keys"
)

// maxErrorBytes bounds the error text written to the ledger.
const maxErrorBytes = 4000

// finishTimeout bounds the statement that records the end of a claim-mode
// run; it runs detached from fn's (possibly cancelled) context.
const finishTimeout = 15 * time.Second

// MigrateWait is how long Migrate waits for a concurrent Migrate of the same
// table (replicas starting together) before giving up.
const MigrateWait = time.Minute

// MigrateKey is the lock Migrate holds while it creates table, so that
// replicas starting together do not race in CREATE TABLE IF NOT EXISTS (on
// PostgreSQL the loser of that race fails with a duplicate key in pg_type).
func MigrateKey(table string) keys.Key { return keys.Name("ormlock.migrate:" + table) }

// The values of the ledger's status column (ormlock.Run's Status).
const (
	StatusRunning = "running"
	StatusDone    = "done"
	StatusFailed  = "failed"
	// StatusSkipped: never runs (a paused job's slot, or one an operator
	// skipped); its error column holds why.
	StatusSkipped = "skipped"
	// StatusRerun: an operator asked for the slot to run again; the next
	// RunScheduled of the job runs it (a claim takes it like 'failed').
	StatusRerun = "rerun"
)

// MaxJobLen is the longest RunOnce job name, in characters: the ledger's job
// column is varchar(191), which keeps it within InnoDB's 767-byte index
// limit for utf8mb4 on older row formats (the (namespace, job, slot) key is
// 1,284 bytes, within InnoDB's 3,072-byte limit for a whole key). A limit,
// not a setting: the adapters' RunOnce docs state it.
const MaxJobLen = 191

// ValidateJob returns an error wrapping errs.ErrInvalidArgument unless
// job can name a RunOnce job: non-empty valid UTF-8 without NUL bytes, at
// most [MaxJobLen] characters, not ending with a space (MySQL/MariaDB would
// give it the ledger row of the name without the space). verb names the
// caller in the error, after the sentinel's text ("ormlock: invalid
// argument: gormlock.RunOnce: empty job name"), as in every other argument
// error of the verbs. Every adapter's RunOnce, Runs and RunScheduled, and
// the scheduler module's constructors (to fail closed at start-up), call it.
func ValidateJob(verb, job string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", errs.ErrInvalidArgument, verb, fmt.Sprintf(format, args...))
	}
	switch {
	case job == "":
		return bad("empty job name")
	case !utf8.ValidString(job) || strings.ContainsRune(job, 0):
		return bad("job name %q is not valid UTF-8 without NUL bytes", job)
	case strings.HasSuffix(job, " "):
		return bad("job name %q ends with a space, which MySQL/MariaDB ignore when comparing job names (it would share the ledger row of the name without it)", job)
	case utf8.RuneCountInString(job) > MaxJobLen:
		return bad("job name is %d characters long, at most %d fit the ledger", utf8.RuneCountInString(job), MaxJobLen)
	}
	return nil
}

// ValidateSlot checks a slot: non-zero, in years 1000 to 9999 (the range of
// MySQL's DATETIME), and a whole second. Every adapter's RunOnce calls it
// before it writes or locks anything: a slot is a scheduled time, and no
// schedule of ormlock is finer than a second, so a slot with a fraction of a
// second is a trigger's wall clock (time.Now()), which differs on every
// replica and would deduplicate nothing.
func ValidateSlot(verb string, slot time.Time) error {
	if slot.IsZero() {
		return fmt.Errorf("%w: %s: zero slot (pass the scheduled time, e.g. from ormlock.Every or ormlock.Cron)", errs.ErrInvalidArgument, verb)
	}
	if y := slot.UTC().Year(); y < 1000 || y > 9999 {
		return fmt.Errorf("%w: %s: slot %v is outside years 1000-9999", errs.ErrInvalidArgument, verb, slot)
	}
	if slot.Nanosecond() != 0 {
		return fmt.Errorf("%w: %s: slot %s has a fraction of a second, so it is a trigger's clock, not a scheduled time, "+
			"and replicas would each run their own slot: pass schedule.Slot(t) (ormlock.Cron, ormlock.Every) or use RunScheduled",
			errs.ErrInvalidArgument, verb, slot.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// DefaultOwner is "hostname/pid".
var DefaultOwner = sync.OnceValue(func() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	s := host + "/" + strconv.Itoa(os.Getpid())
	if utf8.RuneCountInString(s) > config.MaxOwnerLen || !utf8.ValidString(s) {
		s = "pid/" + strconv.Itoa(os.Getpid())
	}
	return s
})
