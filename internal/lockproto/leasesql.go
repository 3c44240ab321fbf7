package lockproto

import (
	"context"
	"database/sql"
	"strconv"
	"strings"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/schema"
	"github.com/ormlock/ormlock/keyhash"
)

// The lease table and its statements on each family of servers
// (docs/PROTOCOL.md, Leases). A row is (namespace, lock_key, reader):
// lock_key is the key's FenceID ("name:" and the name, "id:42",
// "pair:1,2"), so that a key's lease row and its fencing counter share
// their identity; reader is '' for the key's own row, which every
// acquirer of the key writes. The row (namespace, '', '') is the
// namespace's high-water mark: an epoch no new epoch of the namespace may
// be at or below (AdvanceFences raises it).

// LeaseModeExclusive and LeaseModeShared are the lease rows' modes.
const (
	LeaseModeExclusive = "exclusive"
	LeaseModeShared    = "shared"
)

// leaseSQL is the lease table's SQL on one family of servers.
type leaseSQL interface {
	// createSQL is the CREATE TABLE IF NOT EXISTS of the table q.
	createSQL(q string) string
	// createLockSQL serialises the creation of the table name in the
	// creating transaction ("" where the server's DDL needs none:
	// PostgreSQL's CREATE TABLE IF NOT EXISTS raced by another fails on
	// pg_type's unique index, and Migrates of different ledger tables
	// share one lease table).
	createLockSQL(name string) string
	// acquireSQL inserts or takes over n key rows of the table q (its
	// fence table f), returning the new epoch(s) (see each family).
	acquireSQL(q, f string, n int) string
	// acquireArgs are acquireSQL's arguments for the rows rs.
	acquireArgs(ttl int64, owner, holder string, rs []leaseRow) []any
	// acquired runs acquireSQL and reads its answer: the epoch of each row
	// taken, in rs's order, 0 for one not taken.
	acquired(ctx context.Context, q leaseQuerier, query string, args []any, rs []leaseRow) error
	// acquireShared takes rows (the key row, then the holder's reader row)
	// in share mode on db: the key row inserted, taken over once expired,
	// or joined while it is shared, and the reader row inserted, all or
	// nothing; the rows' epochs are set when taken.
	acquireShared(ctx context.Context, db *sql.DB, q, f string, ttl int64, owner string, rows []leaseRow) error
	// releaseShared gives up the reader holder of the key row of (ns,
	// key) at epoch: its reader row deleted, the key row's readers counted
	// down and, with the last, the key row expired.
	releaseShared(ctx context.Context, db Querier, q, ns, key, holder string, epoch int64) error
	// renewSQL extends n leases by (key, epoch, holder), rows locked in
	// key order; its rows affected are the leases renewed.
	renewSQL(q string, n int) string
	// renewArgs are renewSQL's arguments for the distinct rows rs (ttl
	// in microseconds), and the n to build renewSQL with.
	renewArgs(ttl int64, rs []leaseRow) (n int, args []any)
	// releaseSQL expires one lease row by (key, reader, holder): the
	// holder id names one acquisition, whose epoch the holder may not know
	// (an acquire cut short by its context).
	releaseSQL(q string) string
	// checkSQL touches one lease by (key, epoch, holder, not expired), in
	// fn's transaction: no row means the lease is lost.
	checkSQL(q string) string
	// advanceSQL raises namespace $2's high-water mark to $1 above its
	// greatest epoch.
	advanceSQL(q string) string
	// multiRow reports whether acquireSQL takes several rows at once
	// (else a set's rows go one statement each).
	multiRow() bool
	// placeholder is the n-th (1-based) argument.
	placeholder(n int) string
}

// leaseQuerier is where the lease statements run: the pool (each
// statement its own transaction) or a short transaction of its own.
type leaseQuerier interface {
	Querier
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// leaseRow is one row a lease holds: its key, its reader (” for the
// key's own row), the holder id it carries (” for a shared key row, which
// its readers share) and the epoch it got.
type leaseRow struct {
	ns, key        string
	reader, holder string
	epoch          int64
}

// LeaseTable is the lease table of one family of servers.
type LeaseTable struct {
	s    Server
	sql  leaseSQL
	name string
	q    string
}

// NewLeaseTable returns the lease table name (config.ValidIdentifier:
// errs.ErrInvalidArgument otherwise) on d.
func NewLeaseTable(d Dialect, name string) (*LeaseTable, error) {
	if err := config.ValidIdentifier("lease table name", name); err != nil {
		return nil, err
	}
	s, err := ServerOf(d)
	if err != nil {
		return nil, err
	}
	return &LeaseTable{s: s, sql: PerServer[leaseSQL](s, pgLease{}, myLease{}), name: name, q: s.Quote(name)}, nil
}

// Name returns the table's (unquoted) name.
func (t *LeaseTable) Name() string { return t.name }

// CreateSQL returns the CREATE TABLE IF NOT EXISTS statement.
func (t *LeaseTable) CreateSQL() string { return t.sql.createSQL(t.q) }

// Create runs CreateSQL on q, in Migrate's transaction (on PostgreSQL
// after a transaction-level lock of the table's own, so that Migrates of
// different ledger tables do not race on it).
func (t *LeaseTable) Create(ctx context.Context, q Querier) error {
	if l := t.sql.createLockSQL(t.name); l != "" {
		if _, err := q.ExecContext(ctx, l); err != nil {
			return errs.Wrap(err, "create lease table %q: lock", t.name)
		}
	}
	if _, err := q.ExecContext(ctx, t.CreateSQL()); err != nil {
		return errs.Wrap(err, "create lease table %q", t.name)
	}
	return nil
}

// Advance raises namespace ns's high-water mark by by above its greatest
// epoch, committed on q when it returns, so that every epoch issued after
// it is greater than any issued before it that a promoted replica lacks
// (docs/PROTOCOL.md, Leases). A missing table is no error: nothing was
// leased. It returns 1 when the mark moved.
func (t *LeaseTable) Advance(ctx context.Context, q Querier, ns string, by int64) (int64, error) {
	res, err := q.ExecContext(ctx, t.sql.advanceSQL(t.q), by, ns)
	if err != nil {
		if t.s.MissingTable(err) {
			return 0, nil
		}
		return 0, t.wrap("advance the epochs", err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return 0, nil
	}
	return 1, nil
}

func (t *LeaseTable) wrap(what string, err error) error {
	if t.s.MissingTable(err) {
		return errs.Wrap(err, "lease table %q does not exist (create it with Migrate, or run MigrateSQL's statements): %s", t.name, what)
	}
	return errs.Wrap(err, "lease table %q: %s", t.name, what)
}

// tuples is n groups of k placeholders of s, from 1 + skip:
// "($2,$3),($4,$5)".
func tuples(s leaseSQL, n, k, skip int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('(')
		for j := range k {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(s.placeholder(skip + i*k + j + 1))
		}
		b.WriteByte(')')
	}
	return b.String()
}

// pgLease is the lease table on PostgreSQL: clock_timestamp(), the
// server's clock when the statement reads it (not the transaction's
// start); a grant's COMMIT waits for its WAL flush even under
// synchronous_commit = off (set to local for its transaction, as a fencing
// token's), so that a crash cannot lose a grant the holder was told of.
type pgLease struct{}

func (pgLease) placeholder(n int) string { return "$" + strconv.Itoa(n) }
func (pgLease) multiRow() bool           { return true }

func (pgLease) createSQL(q string) string { return schema.Postgres.Lease(q) }

func (pgLease) createLockSQL(name string) string {
	return "SELECT pg_advisory_xact_lock(" + strconv.FormatInt(keyhash.Int64("ormlock.migrate:"+name), 10) + ")"
}

// pgSyncLocal raises synchronous_commit to local for the statement's
// transaction when the session has it off (as a fencing token's
// issuance); true.
const pgSyncLocal = `set_config('synchronous_commit', CASE current_setting('synchronous_commit') WHEN 'off' THEN 'local' ELSE current_setting('synchronous_commit') END, true) IS NOT NULL`

// acquireSQL: $1 ttl in microseconds, $2 owner, $3 holder, then
// (namespace, lock_key) per row. A new row's epoch is one above the
// greater of the namespace's high-water mark and the key's fencing
// counter; a row taken over gets one above the greater of its own epoch
// and that. A row whose lease has not expired is left alone and returns
// nothing.
func (s pgLease) acquireSQL(q, f string, n int) string {
	return `INSERT INTO ` + q + ` AS l (namespace, lock_key, reader, epoch, mode, owner, holder, acquired_at, expires_at)
SELECT v.ns, v.k, '', GREATEST(
	(SELECT h.epoch FROM ` + q + ` h WHERE h.namespace = v.ns AND h.lock_key = '' AND h.reader = ''),
	(SELECT t.token FROM ` + f + ` t WHERE t.namespace = v.ns AND t.lock_key = v.k), 0) + 1,
	'exclusive', $2, $3, clock_timestamp(), clock_timestamp() + $1::bigint * interval '1 microsecond'
FROM (VALUES ` + tuples(s, n, 2, 3) + `) AS v(ns, k)
WHERE ` + pgSyncLocal + `
ON CONFLICT (namespace, lock_key, reader) DO UPDATE
SET epoch = GREATEST(l.epoch + 1, EXCLUDED.epoch), mode = EXCLUDED.mode, owner = EXCLUDED.owner, holder = EXCLUDED.holder,
	acquired_at = clock_timestamp(), expires_at = clock_timestamp() + $1::bigint * interval '1 microsecond', renewals = 0
WHERE l.expires_at <= clock_timestamp()
RETURNING l.namespace, l.lock_key, l.epoch`
}

func (pgLease) acquireArgs(ttl int64, owner, holder string, rs []leaseRow) []any {
	args := make([]any, 0, 3+2*len(rs))
	args = append(args, ttl, owner, holder)
	for _, r := range rs {
		args = append(args, r.ns, r.key)
	}
	return args
}

func (pgLease) acquired(ctx context.Context, q leaseQuerier, query string, args []any, rs []leaseRow) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var r leaseRow
		if err := rows.Scan(&r.ns, &r.key, &r.epoch); err != nil {
			return err
		}
		for i := range rs {
			if rs[i].ns == r.ns && rs[i].key == r.key {
				rs[i].epoch = r.epoch
			}
		}
	}
	return rows.Err()
}

func (pgLease) releaseSQL(q string) string {
	return `UPDATE ` + q + ` SET expires_at = LEAST(expires_at, clock_timestamp()), renewals = renewals + 1
WHERE namespace = $1 AND lock_key = $2 AND reader = $3 AND holder = $4`
}

func (pgLease) checkSQL(q string) string {
	return `UPDATE ` + q + ` SET renewals = renewals + 1
WHERE namespace = $1 AND lock_key = $2 AND reader = $3 AND epoch = $4 AND holder = $5 AND expires_at > clock_timestamp()`
}

func (pgLease) advanceSQL(q string) string {
	return `INSERT INTO ` + q + ` AS l (namespace, lock_key, reader, epoch, acquired_at, expires_at)
SELECT $2::text, '', '', COALESCE(MAX(epoch), 0) + $1::bigint, clock_timestamp(), '-infinity' FROM ` + q + ` WHERE namespace = $2::text
ON CONFLICT (namespace, lock_key, reader) DO UPDATE SET epoch = EXCLUDED.epoch`
}

// myLease is the lease table on MySQL/MariaDB: UTC_TIMESTAMP(6), the
// statement's time on the server's clock in UTC whatever the session's
// time zone.
type myLease struct{}

func (myLease) placeholder(int) string { return "?" }
func (myLease) multiRow() bool         { return false }

func (myLease) createSQL(q string) string { return schema.MySQL.Lease(q) }

func (myLease) createLockSQL(string) string { return "" }

// acquireSQL takes one row (n is 1): namespace, lock_key, owner, holder,
// ttl in microseconds. The new epoch comes back as the result's
// LastInsertId: LAST_INSERT_ID(epoch) for a row inserted or taken over,
// LAST_INSERT_ID(0) for one whose lease has not expired (left as it is).
// Every assignment asks whether the row had expired before expires_at,
// the last one, changes it.
func (myLease) acquireSQL(q, f string, _ int) string {
	const expired = "expires_at <= UTC_TIMESTAMP(6)"
	return "INSERT INTO " + q + ` (namespace, lock_key, reader, epoch, mode, owner, holder, acquired_at, expires_at)
SELECT v.ns, v.k, '', LAST_INSERT_ID(GREATEST(
	COALESCE((SELECT h.epoch FROM ` + q + ` h WHERE h.namespace = v.ns AND h.lock_key = '' AND h.reader = ''), 0),
	COALESCE((SELECT t.token FROM ` + f + ` t WHERE t.namespace = v.ns AND t.lock_key = v.k), 0)) + 1),
	'exclusive', v.o, v.hd, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL v.ttl MICROSECOND
FROM (SELECT ? AS ns, CAST(? AS BINARY) AS k, ? AS o, CAST(? AS BINARY) AS hd, ? AS ttl) AS v
ON DUPLICATE KEY UPDATE
	epoch = IF(` + expired + `, LAST_INSERT_ID(GREATEST(epoch + 1, VALUES(epoch))), epoch + LAST_INSERT_ID(0)),
	mode = IF(` + expired + `, VALUES(mode), mode),
	owner = IF(` + expired + `, VALUES(owner), owner),
	holder = IF(` + expired + `, VALUES(holder), holder),
	renewals = IF(` + expired + `, 0, renewals),
	acquired_at = IF(` + expired + `, UTC_TIMESTAMP(6), acquired_at),
	expires_at = IF(` + expired + `, VALUES(expires_at), expires_at)`
}

func (myLease) acquireArgs(ttl int64, owner, holder string, rs []leaseRow) []any {
	return []any{rs[0].ns, []byte(rs[0].key), owner, []byte(holder), ttl}
}

func (myLease) acquired(ctx context.Context, q leaseQuerier, query string, args []any, rs []leaseRow) error {
	res, err := q.ExecContext(ctx, query, args...)
	if err != nil {
		return err
	}
	id, err := res.LastInsertId()
	if err != nil {
		return err
	}
	rs[0].epoch = id
	return nil
}

func (myLease) releaseSQL(q string) string {
	return "UPDATE " + q + ` SET expires_at = LEAST(expires_at, UTC_TIMESTAMP(6)), renewals = renewals + 1
WHERE namespace = ? AND lock_key = ? AND reader = ? AND holder = ?`
}

func (myLease) checkSQL(q string) string {
	return "UPDATE " + q + ` SET renewals = renewals + 1
WHERE namespace = ? AND lock_key = ? AND reader = ? AND epoch = ? AND holder = ? AND expires_at > UTC_TIMESTAMP(6)`
}

func (myLease) advanceSQL(q string) string {
	return "INSERT INTO " + q + ` (namespace, lock_key, reader, epoch, acquired_at, expires_at)
SELECT v.ns, '', '', COALESCE((SELECT MAX(epoch) FROM ` + q + ` m WHERE m.namespace = v.ns), 0) + v.n, UTC_TIMESTAMP(6), '1970-01-01'
FROM (SELECT ? AS n, ? AS ns) AS v
ON DUPLICATE KEY UPDATE epoch = VALUES(epoch)`
}
