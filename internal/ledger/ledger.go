// Package ledger is the RunOnce job ledger, written once for the four
// adapters (gormlock, entlock, sqllock, pgxlock): the ledger table's SQL per
// dialect (create, claim, finish, read) and the RunOnce flows on top of the
// lock protocol. It works on database/sql values (a lockproto.Querier,
// *sql.DB) and a lockproto.Dialect, never on an ORM's types; lock SQL stays
// in lockproto.
//
// # The table
//
// One row per (namespace, job, slot), the primary key:
//
//	namespace    varchar(128)   ormlock.WithNamespace, '' for none (utf8mb4_bin)
//	job          varchar(191)   the job name (utf8mb4_bin on MySQL: exact match)
//	slot         timestamptz / DATETIME(6) in UTC
//	status       'running', 'done' or 'failed'
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
// row that is not 'done' (a claim-mode run that failed, or whose owner died;
// safe because the caller holds the (job, slot) lock), and leaves a 'done'
// row untouched.
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
	"context"
	"database/sql"
	"errors"
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
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/status"
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

// Table is the ledger table of one dialect.
type Table struct {
	d    lockproto.Dialect
	name string
	q    string // quoted name
}

// NewTable validates name (config.ValidIdentifier) for dialect d.
func NewTable(d lockproto.Dialect, name string) (*Table, error) {
	if err := config.ValidIdentifier("ledger table name", name); err != nil {
		return nil, err
	}
	t := &Table{d: d, name: name}
	switch d {
	case lockproto.Postgres:
		t.q = `"` + name + `"`
	case lockproto.MySQL:
		t.q = "`" + name + "`"
	default:
		return nil, fmt.Errorf("%w: dialect %d", errs.ErrUnsupportedDialect, d)
	}
	return t, nil
}

// Name returns the table's (unquoted) name.
func (t *Table) Name() string { return t.name }

func (t *Table) pg() bool { return t.d == lockproto.Postgres }

// CreateSQL returns the CREATE TABLE IF NOT EXISTS statement. On
// MySQL/MariaDB it declares the index on (namespace, slot); on PostgreSQL,
// where an index is a statement of its own, Migrate adds it (ensureIndex).
func (t *Table) CreateSQL() string {
	if t.pg() {
		return `CREATE TABLE IF NOT EXISTS ` + t.q + ` (
	namespace   varchar(128) NOT NULL DEFAULT '',
	job         varchar(191) NOT NULL,
	slot        timestamptz  NOT NULL,
	status      varchar(16)  NOT NULL CHECK (status IN ('running', 'done', 'failed')),
	owner       varchar(255) NOT NULL DEFAULT '',
	started_at  timestamptz  NOT NULL,
	finished_at timestamptz,
	error       text,
	PRIMARY KEY (namespace, job, slot)
)`
	}
	return "CREATE TABLE IF NOT EXISTS " + t.q + ` (
	namespace   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
	job         VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
	slot        DATETIME(6)  NOT NULL,
	status      VARCHAR(16)  NOT NULL,
	owner       VARCHAR(255) CHARACTER SET utf8mb4 NOT NULL DEFAULT '',
	started_at  DATETIME(6)  NOT NULL,
	finished_at DATETIME(6)  NULL,
	error       TEXT         CHARACTER SET utf8mb4 NULL,
	PRIMARY KEY (namespace, job, slot),
	KEY ` + t.quote(t.IndexName()) + ` (namespace, slot),
	CHECK (status IN ('running', 'done', 'failed'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`
}

// Create runs CreateSQL on q.
func (t *Table) Create(ctx context.Context, q lockproto.Querier) error {
	if _, err := q.ExecContext(ctx, t.CreateSQL()); err != nil {
		return errs.Wrap(err, "create ledger table %q", t.name)
	}
	return nil
}

// Migrate creates the ledger table op.Cfg.LedgerTable on db if it does not
// exist, while holding op's lock (made with MigrateKey and a wait), so that
// replicas starting together do not race: on PostgreSQL the lock and the
// CREATE share one transaction; on MySQL/MariaDB the lock is taken on the
// pinned connection that runs the CREATE (DDL commits implicitly there).
func Migrate(ctx context.Context, db *sql.DB, op *lockproto.Op) error {
	t, err := NewTable(op.Dialect, op.Cfg.LedgerTable)
	if err != nil {
		return err
	}
	if op.Dialect == lockproto.MySQL {
		return op.WithNamed(ctx, db, func(conn *sql.Conn) error {
			if err := t.Create(ctx, conn); err != nil {
				return err
			}
			if err := createFence(ctx, conn, op); err != nil {
				return err
			}
			return t.upgrade(ctx, conn)
		})
	}
	// pinned, so that a cancelled wait for the lock asks the server to
	// end it (lockproto.Op.AcquireXactOn)
	conn, err := db.Conn(ctx)
	if err != nil {
		return op.Abandon(ctx, errs.Wrap(err, "pin a connection"))
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return op.Abandon(ctx, errs.Wrap(err, "begin"))
	}
	defer op.EndXact(ctx)
	if err := op.AcquireXactOn(ctx, conn, tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := t.Create(ctx, tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := t.upgrade(ctx, tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := createFence(ctx, tx, op); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return errs.Wrap(err, "commit ledger table %q", t.name)
	}
	return nil
}

// MySQL DATETIME values are passed and read as text in UTC.
const (
	mysqlTime   = "2006-01-02 15:04:05.000000"
	mysqlFormat = "'%Y-%m-%d %H:%i:%s.%f'"
)

// slotArg is the slot as a statement argument.
func (t *Table) slotArg(slot time.Time) any {
	if t.pg() {
		return slot
	}
	return slot.UTC().Format(mysqlTime)
}

func parseMySQLTime(s string) (time.Time, error) {
	v, err := time.ParseInLocation(mysqlTime, s, time.UTC)
	if err != nil {
		return time.Time{}, errs.Wrap(err, "ledger time %q", s)
	}
	return v, nil
}

// wrap annotates a ledger statement's error, with a hint when the table is
// missing.
func (t *Table) wrap(what string, err error) error {
	if missingTable(err) {
		return errs.Wrap(err, "ledger table %q does not exist (create it with Migrate): %s", t.name, what)
	}
	if missingColumn(err) {
		return errs.Wrap(err, "ledger table %q has an earlier shape (upgrade it with Migrate, which adds the namespace column): %s", t.name, what)
	}
	return errs.Wrap(err, "ledger table %q: %s", t.name, what)
}

func missingColumn(err error) bool {
	if lockproto.SQLState(err) == "42703" { // undefined_column
		return true
	}
	return lockproto.MySQLErrno(err) == 1054 // ER_BAD_FIELD_ERROR
}

func missingTable(err error) bool {
	if lockproto.SQLState(err) == "42P01" { // undefined_table
		return true
	}
	return lockproto.MySQLErrno(err) == 1146 // ER_NO_SUCH_TABLE
}

// claim claims (ns, job, slot) for owner (see the package doc): ok is false when
// the slot is already done; started is the claim's started_at, which the
// finishing UPDATE matches.
func (t *Table) claim(ctx context.Context, q lockproto.Querier, ns, job string, slot time.Time, owner string) (started time.Time, ok bool, err error) {
	if t.pg() {
		err := q.QueryRowContext(ctx, `INSERT INTO `+t.q+` AS r (namespace, job, slot, status, owner, started_at)
VALUES ($4, $1, $2, 'running', $3, clock_timestamp())
ON CONFLICT (namespace, job, slot) DO UPDATE
SET status = 'running', owner = EXCLUDED.owner, started_at = EXCLUDED.started_at, finished_at = NULL, error = NULL
WHERE r.status <> 'done'
RETURNING started_at`, job, slot, owner, ns).Scan(&started)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return time.Time{}, false, nil
		case err != nil:
			return time.Time{}, false, t.wrap("claim", err)
		}
		return started, true, nil
	}
	res, err := q.ExecContext(ctx, "INSERT INTO "+t.q+` (namespace, job, slot, status, owner, started_at)
VALUES (?, ?, ?, 'running', ?, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE
owner = IF(status = 'done', owner, ?),
started_at = IF(status = 'done', started_at, UTC_TIMESTAMP(6)),
finished_at = IF(status = 'done', finished_at, NULL),
error = IF(status = 'done', error, NULL),
status = IF(status = 'done', status, 'running')`, ns, job, t.slotArg(slot), owner, owner)
	if err != nil {
		return time.Time{}, false, t.wrap("claim", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return time.Time{}, false, t.wrap("claim", err)
	}
	if n == 0 {
		return time.Time{}, false, nil
	}
	var status, rowOwner, startedText string
	err = q.QueryRowContext(ctx, "SELECT status, owner, DATE_FORMAT(started_at, "+mysqlFormat+") FROM "+t.q+
		" WHERE namespace = ? AND job = ? AND slot = ?", ns, job, t.slotArg(slot)).Scan(&status, &rowOwner, &startedText)
	if err != nil {
		return time.Time{}, false, t.wrap("read back the claim", err)
	}
	switch {
	case status == StatusDone:
		return time.Time{}, false, nil
	case status == StatusRunning && rowOwner == owner:
		started, err = parseMySQLTime(startedText)
		return started, err == nil, err
	}
	return time.Time{}, false, fmt.Errorf("ormlock: ledger table %q: claim of %q at %s left status %q owner %q; is another writer bypassing the lock?", t.name, job, slot.Format(time.RFC3339Nano), status, rowOwner)
}

// finish records the end of the claim (job, slot, owner, started): status
// done or failed, finished_at now, error text (NULL when empty). It reports
// an error wrapping errs.ErrLockLost when the claim is no longer there,
// i.e. another instance took the row over.
func (t *Table) finish(ctx context.Context, q lockproto.Querier, ns, job string, slot time.Time, owner string, started time.Time, status, errText string) error {
	var errArg any
	if errText != "" {
		errArg = ErrorText(errText)
	}
	var query string
	var startedArg any = started
	if t.pg() {
		query = `UPDATE ` + t.q + ` SET status = $1, finished_at = clock_timestamp(), error = $2
WHERE job = $3 AND slot = $4 AND status = 'running' AND owner = $5 AND started_at = $6 AND namespace = $7`
	} else {
		query = "UPDATE " + t.q + ` SET status = ?, finished_at = UTC_TIMESTAMP(6), error = ?
WHERE job = ? AND slot = ? AND status = 'running' AND owner = ? AND started_at = ? AND namespace = ?`
		startedArg = started.UTC().Format(mysqlTime)
	}
	res, err := q.ExecContext(ctx, query, string(status), errArg, job, t.slotArg(slot), owner, startedArg, ns)
	if err != nil {
		return t.wrap("mark "+string(status), err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return t.wrap("mark "+string(status), err)
	}
	if n != 1 {
		return fmt.Errorf("%w: ledger table %q: the claim of %q at %s by %q was taken over before it could be marked %s",
			errs.ErrLockLost, t.name, job, slot.Format(time.RFC3339Nano), owner, status)
	}
	return nil
}

// abandon marks failed the 'running' claim of (ns, job, slot) by owner,
// whatever its started_at, with errText; no such row is not an error. The
// caller holds the (job, slot) lock, so the row cannot be a live run's.
func (t *Table) abandon(ctx context.Context, q lockproto.Querier, ns, job string, slot time.Time, owner, errText string) error {
	query := "UPDATE " + t.q + ` SET status = 'failed', finished_at = UTC_TIMESTAMP(6), error = ?
WHERE namespace = ? AND job = ? AND slot = ? AND status = 'running' AND owner = ?`
	if t.pg() {
		query = `UPDATE ` + t.q + ` SET status = 'failed', finished_at = clock_timestamp(), error = $1
WHERE namespace = $2 AND job = $3 AND slot = $4 AND status = 'running' AND owner = $5`
	}
	if _, err := q.ExecContext(ctx, query, ErrorText(errText), ns, job, t.slotArg(slot), owner); err != nil {
		return t.wrap("mark an interrupted claim failed", err)
	}
	return nil
}

// ErrorText prepares an error message for the ledger's error column: valid
// UTF-8 without NUL bytes, at most 4000 bytes (cut at a character boundary,
// marked "…[truncated]").
func ErrorText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "")
	if len(s) <= maxErrorBytes {
		return s
	}
	const mark = "…[truncated]"
	cut := maxErrorBytes - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// Runs returns the last limit rows of job in namespace ns, newest slot
// first, as the ledger holds them (Stale false: see [Table.MarkStale]).
func (t *Table) Runs(ctx context.Context, q Querier, ns, job string, limit int) ([]Row, error) {
	query := t.selectRows() + ` WHERE namespace = $1 AND job = $2 ORDER BY slot DESC LIMIT $3`
	if !t.pg() {
		query = t.selectRows() + " WHERE namespace = ? AND job = ? ORDER BY slot DESC LIMIT ?"
	}
	rs, err := t.query(ctx, q, query, ns, job, limit)
	if err != nil {
		return nil, t.wrap("read runs", err)
	}
	return rs, nil
}

// query runs query, a selectRows with its WHERE, on q and reads its rows.
func (t *Table) query(ctx context.Context, q Querier, query string, args ...any) ([]Row, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		r, err := t.scanRow(rows.Scan)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// selectRows is the SELECT of every column of a [Row], before its WHERE:
// MySQL DATETIME values as text in UTC (see the package doc).
func (t *Table) selectRows() string {
	if t.pg() {
		return `SELECT namespace, job, slot, status, owner, started_at, finished_at, error FROM ` + t.q
	}
	return "SELECT namespace, job, DATE_FORMAT(slot, " + mysqlFormat + "), status, owner, DATE_FORMAT(started_at, " + mysqlFormat +
		"), DATE_FORMAT(finished_at, " + mysqlFormat + "), error FROM " + t.q
}

// scanRow reads one row of selectRows with scan (a *sql.Rows' or a
// *sql.Row's Scan).
func (t *Table) scanRow(scan func(dest ...any) error) (Row, error) {
	var r Row
	var errText sql.NullString
	if t.pg() {
		var finished sql.NullTime
		if err := scan(&r.Namespace, &r.Job, &r.Slot, &r.Status, &r.Owner, &r.Started, &finished, &errText); err != nil {
			return Row{}, err
		}
		r.Finished = finished.Time
	} else {
		var slot, started string
		var finished sql.NullString
		err := scan(&r.Namespace, &r.Job, &slot, &r.Status, &r.Owner, &started, &finished, &errText)
		if err == nil {
			r.Slot, err = parseMySQLTime(slot)
		}
		if err == nil {
			r.Started, err = parseMySQLTime(started)
		}
		if err == nil && finished.Valid {
			r.Finished, err = parseMySQLTime(finished.String)
		}
		if err != nil {
			return Row{}, err
		}
	}
	r.Error = errText.String
	r.Slot, r.Started = r.Slot.UTC(), r.Started.UTC()
	if !r.Finished.IsZero() {
		r.Finished = r.Finished.UTC()
		r.Duration = r.Finished.Sub(r.Started)
	}
	return r, nil
}

// Row is one row of the ledger as [Table.Runs] reads it: defined once in
// internal/status, ormlock.Run is the same type.
type Row = status.Run

// RunType is the constraint of ormlock.Run: the one type.
type RunType interface{ Row }

// RunsAs returns rs as R values (ormlock.Run), with err.
func RunsAs[R RunType](rs []Row, err error) ([]R, error) {
	if rs == nil {
		return nil, err
	}
	out := make([]R, len(rs))
	for i, r := range rs {
		out[i] = R(r)
	}
	return out, err
}
