package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/schema"
)

// myLedger is the ledger on MySQL/MariaDB: DATETIME(6) columns written and
// read as text in UTC, ? placeholders, UTC_TIMESTAMP(6).
type myLedger struct{}

// MySQL DATETIME values are passed and read as text in UTC.
const (
	mysqlTime   = "2006-01-02 15:04:05.000000"
	mysqlFormat = "'%Y-%m-%d %H:%i:%s.%f'"
)

func parseMySQLTime(s string) (time.Time, error) {
	v, err := time.ParseInLocation(mysqlTime, s, time.UTC)
	if err != nil {
		return time.Time{}, errs.Wrap(err, "ledger time %q", s)
	}
	return v, nil
}

func (myLedger) createSQL(t *Table) string {
	return schema.MySQL.Ledger(t.q, t.s.Quote(t.IndexName()))
}

// migrate: the lock is taken on the pinned connection that runs the
// CREATE (DDL commits implicitly).
func (myLedger) migrate(ctx context.Context, db *sql.DB, op *lockproto.Op, t *Table) error {
	return op.WithNamed(ctx, db, func(conn *sql.Conn) error {
		if err := t.Create(ctx, conn); err != nil {
			return err
		}
		if err := createFence(ctx, conn, op); err != nil {
			return err
		}
		if err := createRate(ctx, conn, op); err != nil {
			return err
		}
		if err := t.upgrade(ctx, conn); err != nil {
			return err
		}
		return CtlOf(t).migrateControls(ctx, conn)
	})
}

func (myLedger) timeArg(v time.Time) any { return v.UTC().Format(mysqlTime) }

// claim: INSERT ... ON DUPLICATE KEY UPDATE, confirmed by reading the row
// back when it reports a change (see the package doc). A 'done' or
// 'skipped' row is left as it is. With ctl, the statement reads the job's
// pause flag (myPaused): a paused job's slot is written 'skipped' rather
// than 'running' (a 'rerun' row is left pending), and the read-back, which
// reads the flag again, answers errClaimPaused; the caller records the
// reason (pause.go).
func (l myLedger) claim(ctx context.Context, t *Table, q lockproto.Querier, ns, job string, slot time.Time, owner string, ctl bool) (time.Time, bool, error) {
	st, keep, args := "'running'", "status IN ('done', 'skipped')", []any{ns, job, l.timeArg(slot), owner, owner}
	if ctl {
		st = "IF(" + myPaused(t) + ", 'skipped', 'running')"
		keep = "(status IN ('done', 'skipped') OR (status = 'rerun' AND VALUES(status) = 'skipped'))"
		args = []any{ns, job, l.timeArg(slot), ns, job, owner, owner}
	}
	res, err := q.ExecContext(ctx, "INSERT INTO "+t.q+` (namespace, job, slot, status, owner, started_at)
VALUES (?, ?, ?, `+st+`, ?, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE
owner = IF(`+keep+`, owner, ?),
started_at = IF(`+keep+`, started_at, UTC_TIMESTAMP(6)),
finished_at = IF(`+keep+`, finished_at, NULL),
error = IF(`+keep+`, error, NULL),
status = IF(`+keep+`, status, VALUES(status))`, args...)
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
	return l.readBack(ctx, t, q, ns, job, slot, owner, ctl)
}

// myPaused is the job's pause flag in a claim's statement (namespace, job).
func myPaused(t *Table) string {
	return "COALESCE((SELECT c.paused FROM " + t.cq + " c WHERE c.namespace = ? AND c.kind = 'job' AND c.name = ?), 0)"
}

// readBack reads the row a claim changed: claimed when it is this owner's
// 'running' claim, done (ok false) when 'done' or 'skipped', and with ctl
// errClaimPaused when the job is paused.
func (l myLedger) readBack(ctx context.Context, t *Table, q lockproto.Querier, ns, job string, slot time.Time, owner string, ctl bool) (time.Time, bool, error) {
	paused, args := "0", []any{ns, job, l.timeArg(slot)}
	if ctl {
		paused, args = myPaused(t), []any{ns, job, ns, job, l.timeArg(slot)}
	}
	var status, rowOwner, startedText string
	var isPaused bool
	err := q.QueryRowContext(ctx, "SELECT status, owner, DATE_FORMAT(started_at, "+mysqlFormat+"), "+paused+" FROM "+t.q+
		" WHERE namespace = ? AND job = ? AND slot = ?", args...).Scan(&status, &rowOwner, &startedText, &isPaused)
	if err != nil {
		return time.Time{}, false, t.wrap("read back the claim", err)
	}
	mine := status == StatusRunning && rowOwner == owner
	switch {
	case status == StatusDone:
		return time.Time{}, false, nil
	case isPaused && !mine:
		return time.Time{}, false, errClaimPaused
	case status == StatusSkipped:
		return time.Time{}, false, nil
	case mine:
		started, err := parseMySQLTime(startedText)
		return started, err == nil, err
	}
	return time.Time{}, false, fmt.Errorf("ormlock: ledger table %q: claim of %q at %s left status %q owner %q; is another writer bypassing the lock?", t.name, job, slot.Format(time.RFC3339Nano), status, rowOwner)
}

func (myLedger) finishSQL(t *Table) string {
	return "UPDATE " + t.q + ` SET status = ?, finished_at = UTC_TIMESTAMP(6), error = ?
WHERE job = ? AND slot = ? AND status = 'running' AND owner = ? AND started_at = ? AND namespace = ?`
}

func (myLedger) abandonSQL(t *Table) string {
	return "UPDATE " + t.q + ` SET status = 'failed', finished_at = UTC_TIMESTAMP(6), error = ?
WHERE namespace = ? AND job = ? AND slot = ? AND status = 'running' AND owner = ?`
}

func (myLedger) selectRows(t *Table) string {
	return "SELECT namespace, job, DATE_FORMAT(slot, " + mysqlFormat + "), status, owner, DATE_FORMAT(started_at, " + mysqlFormat +
		"), DATE_FORMAT(finished_at, " + mysqlFormat + "), error FROM " + t.q
}

func (myLedger) scanRow(scan func(dest ...any) error, r *Row) error {
	var slot, started string
	var finished, errText sql.NullString
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
	r.Error = errText.String
	return err
}

func (l myLedger) runsSQL(t *Table) string {
	return l.selectRows(t) + " WHERE namespace = ? AND job = ? ORDER BY slot DESC LIMIT ?"
}

func (l myLedger) rowSQL(t *Table) string {
	return l.selectRows(t) + " WHERE namespace = ? AND job = ? AND slot = ?"
}

func (myLedger) serverNowSQL() string {
	return "SELECT DATE_FORMAT(UTC_TIMESTAMP(6), " + mysqlFormat + ")"
}

func (myLedger) scanTime(t *Table, scan func(dest ...any) error) (time.Time, error) {
	var s string
	if err := scan(&s); err != nil {
		return time.Time{}, t.wrap("read the server's clock", err)
	}
	return parseMySQLTime(s)
}

func (myLedger) takenSQL(t *Table) string {
	return "SELECT DATE_FORMAT(c.server_now, " + mysqlFormat + "), DATE_FORMAT(slot, " + mysqlFormat + ") FROM (SELECT UTC_TIMESTAMP(6) AS server_now) c LEFT JOIN " + t.q +
		" ON namespace = ? AND job = ? AND slot >= ? AND slot <= ? AND status <> 'failed'"
}

func (myLedger) scanTaken(t *Table, scan func(dest ...any) error, server *time.Time) (time.Time, bool, error) {
	var now string
	var s sql.NullString
	if err := scan(&now, &s); err != nil {
		return time.Time{}, false, t.wrap(takenWhat, err)
	}
	var err error
	if *server, err = parseMySQLTime(now); err != nil {
		return time.Time{}, false, err
	}
	if !s.Valid {
		return time.Time{}, false, nil
	}
	slot, err := parseMySQLTime(s.String)
	return slot, err == nil, err
}

func (myLedger) pruneFinishedSQL(t *Table) string {
	return "DELETE FROM " + t.q + " WHERE namespace = ? AND slot < ? AND status <> 'running' LIMIT ?"
}

func (l myLedger) pruneStaleSQL(t *Table) (next, del string) {
	return l.selectRows(t) + " WHERE namespace = ? AND status = 'running' AND slot < ? AND (slot, job) > (?, ?) ORDER BY slot, job LIMIT ?",
		"DELETE FROM " + t.q + " WHERE namespace = ? AND job = ? AND slot = ? AND status = 'running' AND owner = ? AND started_at = ?"
}

func (myLedger) hasIndexSQL(t *Table) (string, any) {
	return `SELECT COUNT(*) FROM (SELECT INDEX_NAME FROM information_schema.STATISTICS
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND SUB_PART IS NULL
AND ((SEQ_IN_INDEX = 1 AND COLUMN_NAME = 'namespace') OR (SEQ_IN_INDEX = 2 AND COLUMN_NAME = 'slot'))
GROUP BY INDEX_NAME HAVING COUNT(*) = 2) ix`, t.name
}

func (myLedger) addIndexSQL(t *Table) string {
	return "ALTER TABLE " + t.q + " ADD INDEX " + t.s.Quote(t.IndexName()) + " (namespace, slot)"
}

func (myLedger) hasNamespaceSQL(t *Table) (string, any) {
	return `SELECT COUNT(*) FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = 'namespace'`, t.name
}

// addNamespace: one ALTER TABLE, which InnoDB applies as a whole or not at
// all.
func (myLedger) addNamespace(ctx context.Context, t *Table, q lockproto.Querier) error {
	_, err := q.ExecContext(ctx, "ALTER TABLE "+t.q+
		" ADD COLUMN namespace VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '' FIRST,"+
		" DROP PRIMARY KEY, ADD PRIMARY KEY (namespace, job, slot)")
	if err != nil {
		return errs.Wrap(err, "ledger table %q: add the namespace column", t.name)
	}
	return nil
}

// claimText: GET_LOCK never travels with BEGIN (lockproto).
func (myLedger) claimText(*Table, string, string, time.Time, string, bool) string { return "" }

func (myLedger) doneText(*Table, string, string, time.Time, string) string { return "" }
