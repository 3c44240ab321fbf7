package ledger

import (
	"context"
	"database/sql"
	"strings"
	"time"

	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/schema"
	"github.com/ormlock/ormlock/internal/status"
)

// myCtl is the controls' SQL on MySQL/MariaDB: DATETIME(6) as text in
// UTC, as the ledger's.
type myCtl struct{}

func (myCtl) probeSQL(t *Table) (string, any) {
	return `SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?`, t.name + "_controls"
}

// narrowChecksSQL: MySQL's CHECK_CONSTRAINTS has no TABLE_NAME (MariaDB's
// has), so the table's constraints are found in TABLE_CONSTRAINTS.
func (myCtl) narrowChecksSQL(t *Table) (string, any) {
	return `SELECT DISTINCT tc.CONSTRAINT_NAME FROM information_schema.TABLE_CONSTRAINTS tc
JOIN information_schema.CHECK_CONSTRAINTS cc ON cc.CONSTRAINT_SCHEMA = tc.CONSTRAINT_SCHEMA AND cc.CONSTRAINT_NAME = tc.CONSTRAINT_NAME
WHERE tc.TABLE_SCHEMA = DATABASE() AND tc.TABLE_NAME = ? AND tc.CONSTRAINT_TYPE = 'CHECK'
AND cc.CHECK_CLAUSE LIKE '%status%' AND cc.CHECK_CLAUSE NOT LIKE '%skipped%'`, t.name
}

// widenCheckSQL: two statements (MariaDB refuses to drop and add one name
// in one ALTER TABLE); a failure between them leaves the table without the
// CHECK, which the next Migrate does not restore, and the ledger works.
func (myCtl) widenCheckSQL(t *Table, name string) []string {
	q := "`" + strings.ReplaceAll(name, "`", "``") + "`"
	return []string{"ALTER TABLE " + t.q + " DROP CONSTRAINT " + q, "ALTER TABLE " + t.q + " ADD CONSTRAINT " + q + " CHECK (status IN " + schema.StatusList + ")"}
}

// pausedErr: the MySQL/MariaDB claim reads the flag back (mysql.go).
func (myCtl) pausedErr(error) bool { return false }

func (myCtl) readControlSQL(t *Table) string {
	return "SELECT paused, COALESCE(schedule, ''), author, COALESCE(reason, '') FROM " + t.cq +
		" WHERE namespace = ? AND kind = 'job' AND name = ?"
}

func (myCtl) setPaused(ctx context.Context, t *Table, q lockproto.Querier, ns, job string, paused bool, author, reason string) error {
	_, err := q.ExecContext(ctx, "INSERT INTO "+t.cq+` (namespace, kind, name, paused, author, reason, changed_at)
VALUES (?, 'job', ?, ?, ?, ?, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE paused = ?, author = ?, reason = ?, changed_at = UTC_TIMESTAMP(6)`,
		ns, job, paused, author, reason, paused, author, reason)
	return err
}

func (myCtl) slotStatusSQL(t *Table) string {
	return "SELECT status FROM " + t.q + " WHERE namespace = ? AND job = ? AND slot = ?"
}

func (myCtl) markSlot(ctx context.Context, t *Table, q lockproto.Querier, ns, job string, slot time.Time, st, owner, errText, from string) error {
	// the assignments are made in order, each seeing the ones before:
	// status last, error after finished_at (from may test it)
	change := strings.ReplaceAll(from, "r.", "")
	_, err := q.ExecContext(ctx, "INSERT INTO "+t.q+` (namespace, job, slot, status, owner, started_at, finished_at, error)
VALUES (?, ?, ?, ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULLIF(?, ''))
ON DUPLICATE KEY UPDATE
finished_at = IF(`+change+`, COALESCE(finished_at, UTC_TIMESTAMP(6)), finished_at),
error = IF(`+change+`, COALESCE(NULLIF(?, ''), error), error),
status = IF(`+change+`, ?, status)`,
		ns, job, t.slotArg(slot), st, owner, errText, errText, st)
	return err
}

func (myCtl) insertAction(ctx context.Context, t *Table, q lockproto.Querier, rec *status.ActionRecord) error {
	var slot any
	if !rec.Slot.IsZero() {
		slot = t.slotArg(rec.Slot)
	}
	res, err := q.ExecContext(ctx, "INSERT INTO "+t.aq+` (namespace, kind, name, slot, author, reason, outcome, at)
VALUES (?, ?, ?, ?, ?, NULLIF(?, ''), ?, UTC_TIMESTAMP(6))`,
		rec.Namespace, string(rec.Kind), actionName(rec), slot, rec.Author, rec.Reason, rec.Outcome)
	if err != nil {
		return err
	}
	if rec.ID, err = res.LastInsertId(); err != nil {
		return err
	}
	var at string
	if err := q.QueryRowContext(ctx, "SELECT DATE_FORMAT(at, "+mysqlFormat+") FROM "+t.aq+" WHERE id = ?", rec.ID).Scan(&at); err != nil {
		return err
	}
	rec.At, err = parseMySQLTime(at)
	return err
}

func (myCtl) controlsSQL(t *Table) string {
	return "SELECT namespace, name, paused, COALESCE(schedule, ''), author, COALESCE(reason, ''), DATE_FORMAT(changed_at, " + mysqlFormat + ") FROM " + t.cq +
		" WHERE namespace = ? AND kind = 'job' ORDER BY name LIMIT ?"
}

func (myCtl) scanControl(scan func(dest ...any) error, c *status.JobControl) error {
	var changed string
	if err := scan(&c.Namespace, &c.Job, &c.Paused, &c.Schedule, &c.Author, &c.Reason, &changed); err != nil {
		return err
	}
	var err error
	c.Changed, err = parseMySQLTime(changed)
	return err
}

func (myCtl) actionsSQL(t *Table, byName bool) string {
	s := "SELECT id, namespace, kind, name, DATE_FORMAT(slot, " + mysqlFormat + "), author, COALESCE(reason, ''), COALESCE(outcome, ''), DATE_FORMAT(at, " + mysqlFormat + ") FROM " + t.aq + " WHERE namespace = ?"
	if byName {
		return s + " AND name = ? ORDER BY id DESC LIMIT ?"
	}
	return s + " ORDER BY id DESC LIMIT ?"
}

func (myCtl) scanAction(scan func(dest ...any) error, a *status.ActionRecord) error {
	var slot sql.NullString
	var name, at string
	if err := scan(&a.ID, &a.Namespace, &a.Kind, &name, &slot, &a.Author, &a.Reason, &a.Outcome, &at); err != nil {
		return err
	}
	var err error
	if a.At, err = parseMySQLTime(at); err != nil {
		return err
	}
	if slot.Valid {
		if a.Slot, err = parseMySQLTime(slot.String); err != nil {
			return err
		}
	}
	setActionName(a, name)
	return nil
}

func (myCtl) recordSchedule(ctx context.Context, t *Table, q lockproto.Querier, ns, job, text string) error {
	_, err := q.ExecContext(ctx, "INSERT INTO "+t.cq+` (namespace, kind, name, schedule, changed_at)
VALUES (?, 'job', ?, ?, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE schedule = ?`, ns, job, text, text)
	return err
}

func (myCtl) askRerun(ctx context.Context, t *Table, q lockproto.Querier, ns, job string) error {
	_, err := q.ExecContext(ctx, "INSERT INTO "+t.cq+` (namespace, kind, name, rerun_asked, changed_at)
VALUES (?, 'job', ?, 1, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE rerun_asked = rerun_asked + 1`, ns, job)
	return err
}

func (myCtl) rerunsSQL(t *Table) string {
	return "SELECT c.rerun_asked, DATE_FORMAT(l.slot, " + mysqlFormat + ") FROM " + t.cq + " c\n" +
		"LEFT JOIN " + t.q + " l ON l.namespace = c.namespace AND l.job = c.name AND l.status = 'rerun'\n" +
		"WHERE c.namespace = ? AND c.kind = 'job' AND c.name = ? AND c.rerun_asked > c.rerun_seen\n" +
		"ORDER BY l.slot LIMIT ?"
}

func (myCtl) scanRerun(scan func(dest ...any) error) (int64, time.Time, bool, error) {
	var asked int64
	var s sql.NullString
	if err := scan(&asked, &s); err != nil || !s.Valid {
		return asked, time.Time{}, false, err
	}
	slot, err := parseMySQLTime(s.String)
	return asked, slot, err == nil, err
}

func (myCtl) seenReruns(ctx context.Context, t *Table, q lockproto.Querier, ns, job string, asked int64) error {
	_, err := q.ExecContext(ctx, "UPDATE "+t.cq+" SET rerun_seen = ?\nWHERE namespace = ? AND kind = 'job' AND name = ? AND rerun_seen < ?", asked, ns, job, asked)
	return err
}
