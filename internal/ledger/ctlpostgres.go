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

// pgCtl is the controls' SQL on PostgreSQL.
type pgCtl struct{}

// pgPausedSetting is the setting whose reading raises in the claim of a
// paused job's slot (claim.go): SQLSTATE 42704 naming it.
const pgPausedSetting = "ormlock.job_paused"

func (pgCtl) probeSQL(t *Table) (string, any) {
	return `SELECT COUNT(*) FROM pg_class WHERE oid = to_regclass($1)`, t.cq
}

func (pgCtl) narrowChecksSQL(t *Table) (string, any) {
	return `SELECT conname FROM pg_constraint WHERE conrelid = to_regclass($1) AND contype = 'c'
AND pg_get_constraintdef(oid) LIKE '%status%' AND pg_get_constraintdef(oid) NOT LIKE '%skipped%'`, t.q
}

func (pgCtl) widenCheckSQL(t *Table, name string) []string {
	q := `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
	return []string{`ALTER TABLE ` + t.q + ` DROP CONSTRAINT ` + q + `, ADD CONSTRAINT ` + q + ` CHECK (status IN ` + schema.StatusList + `)`}
}

func (pgCtl) pausedErr(err error) bool {
	return lockproto.SQLState(err) == "42704" && strings.Contains(err.Error(), pgPausedSetting)
}

func (pgCtl) readControlSQL(t *Table) string {
	return `SELECT paused, COALESCE(schedule, ''), author, COALESCE(reason, '') FROM ` + t.cq +
		` WHERE namespace = $1 AND kind = 'job' AND name = $2`
}

func (pgCtl) setPaused(ctx context.Context, t *Table, q lockproto.Querier, ns, job string, paused bool, author, reason string) error {
	_, err := q.ExecContext(ctx, `INSERT INTO `+t.cq+` AS c (namespace, kind, name, paused, author, reason, changed_at)
VALUES ($1, 'job', $2, $3, $4, $5, clock_timestamp())
ON CONFLICT (namespace, kind, name) DO UPDATE
SET paused = EXCLUDED.paused, author = EXCLUDED.author, reason = EXCLUDED.reason, changed_at = EXCLUDED.changed_at`,
		ns, job, paused, author, reason)
	return err
}

func (pgCtl) slotStatusSQL(t *Table) string {
	return `SELECT status FROM ` + t.q + ` WHERE namespace = $1 AND job = $2 AND slot = $3`
}

func (pgCtl) markSlot(ctx context.Context, t *Table, q lockproto.Querier, ns, job string, slot time.Time, st, owner, errText, from string) error {
	_, err := q.ExecContext(ctx, `INSERT INTO `+t.q+` AS r (namespace, job, slot, status, owner, started_at, finished_at, error)
VALUES ($1, $2, $3, $4, $5, clock_timestamp(), clock_timestamp(), NULLIF($6, ''))
ON CONFLICT (namespace, job, slot) DO UPDATE
SET status = EXCLUDED.status, error = COALESCE(EXCLUDED.error, r.error), finished_at = COALESCE(r.finished_at, EXCLUDED.finished_at)
WHERE `+from, ns, job, slot, st, owner, errText)
	return err
}

func (pgCtl) insertAction(ctx context.Context, t *Table, q lockproto.Querier, rec *status.ActionRecord) error {
	var slot any
	if !rec.Slot.IsZero() {
		slot = rec.Slot
	}
	err := q.QueryRowContext(ctx, `INSERT INTO `+t.aq+` (namespace, kind, name, slot, author, reason, outcome, at)
VALUES ($1, $2, $3, $4, $5, NULLIF($6, ''), $7, clock_timestamp()) RETURNING id, at`,
		rec.Namespace, string(rec.Kind), actionName(rec), slot, rec.Author, rec.Reason, rec.Outcome).Scan(&rec.ID, &rec.At)
	rec.At = rec.At.UTC()
	return err
}

func (pgCtl) controlsSQL(t *Table) string {
	return `SELECT namespace, name, paused, COALESCE(schedule, ''), author, COALESCE(reason, ''), changed_at FROM ` + t.cq +
		` WHERE namespace = $1 AND kind = 'job' ORDER BY name LIMIT $2`
}

func (pgCtl) scanControl(scan func(dest ...any) error, c *status.JobControl) error {
	err := scan(&c.Namespace, &c.Job, &c.Paused, &c.Schedule, &c.Author, &c.Reason, &c.Changed)
	c.Changed = c.Changed.UTC()
	return err
}

func (pgCtl) actionsSQL(t *Table, byName bool) string {
	s := `SELECT id, namespace, kind, name, slot, author, COALESCE(reason, ''), COALESCE(outcome, ''), at FROM ` + t.aq + ` WHERE namespace = $1`
	if byName {
		return s + ` AND name = $2 ORDER BY id DESC LIMIT $3`
	}
	return s + ` ORDER BY id DESC LIMIT $2`
}

func (pgCtl) scanAction(scan func(dest ...any) error, a *status.ActionRecord) error {
	var slot sql.NullTime
	var name string
	if err := scan(&a.ID, &a.Namespace, &a.Kind, &name, &slot, &a.Author, &a.Reason, &a.Outcome, &a.At); err != nil {
		return err
	}
	a.At = a.At.UTC()
	if slot.Valid {
		a.Slot = slot.Time.UTC()
	}
	setActionName(a, name)
	return nil
}

func (pgCtl) recordSchedule(ctx context.Context, t *Table, q lockproto.Querier, ns, job, text string) error {
	_, err := q.ExecContext(ctx, `INSERT INTO `+t.cq+` AS c (namespace, kind, name, schedule, changed_at)
VALUES ($1, 'job', $2, $3, clock_timestamp())
ON CONFLICT (namespace, kind, name) DO UPDATE SET schedule = EXCLUDED.schedule
WHERE c.schedule IS DISTINCT FROM EXCLUDED.schedule`, ns, job, text)
	return err
}

func (pgCtl) askRerun(ctx context.Context, t *Table, q lockproto.Querier, ns, job string) error {
	_, err := q.ExecContext(ctx, `INSERT INTO `+t.cq+` AS c (namespace, kind, name, rerun_asked, changed_at)
VALUES ($1, 'job', $2, 1, clock_timestamp())
ON CONFLICT (namespace, kind, name) DO UPDATE SET rerun_asked = c.rerun_asked + 1`, ns, job)
	return err
}

func (pgCtl) rerunsSQL(t *Table) string {
	return `SELECT c.rerun_asked, l.slot FROM ` + t.cq + ` c
LEFT JOIN ` + t.q + ` l ON l.namespace = c.namespace AND l.job = c.name AND l.status = 'rerun'
WHERE c.namespace = $1 AND c.kind = 'job' AND c.name = $2 AND c.rerun_asked > c.rerun_seen
ORDER BY l.slot LIMIT $3`
}

func (pgCtl) scanRerun(scan func(dest ...any) error) (int64, time.Time, bool, error) {
	var asked int64
	var v sql.NullTime
	err := scan(&asked, &v)
	return asked, v.Time.UTC(), v.Valid, err
}

func (pgCtl) seenReruns(ctx context.Context, t *Table, q lockproto.Querier, ns, job string, asked int64) error {
	_, err := q.ExecContext(ctx, `UPDATE `+t.cq+` SET rerun_seen = $3
WHERE namespace = $1 AND kind = 'job' AND name = $2 AND rerun_seen < $3`, ns, job, asked)
	return err
}
