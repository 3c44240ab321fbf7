package ledger

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/schema"
)

// pgLedger is the ledger on PostgreSQL: timestamptz columns, $n
// placeholders, clock_timestamp().
type pgLedger struct{}

func (pgLedger) createSQL(t *Table) string {
	return schema.Postgres.Ledger(t.q, t.s.Quote(t.IndexName()))
}

// migrate: the lock and the CREATE share one transaction, on a pinned
// connection, so that a cancelled wait for the lock asks the server to
// end it (lockproto.Op.AcquireXactOn).
func (pgLedger) migrate(ctx context.Context, db *sql.DB, op *lockproto.Op, t *Table) error {
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
	if err := createRate(ctx, tx, op); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := CtlOf(t).migrateControls(ctx, tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return errs.Wrap(err, "commit ledger table %q", t.name)
	}
	return nil
}

func (pgLedger) timeArg(v time.Time) any { return v }

// claim: INSERT ... ON CONFLICT DO UPDATE ... RETURNING, a row back exactly
// when the slot was claimed (see the package doc); with ctl, the pause
// flag's read (pgClaimWhere) in the same statement.
func (pgLedger) claim(ctx context.Context, t *Table, q lockproto.Querier, ns, job string, slot time.Time, owner string, ctl bool) (time.Time, bool, error) {
	insert := `VALUES ($4, $1, $2, 'running', $3, clock_timestamp())`
	if ctl {
		insert = `SELECT $4::varchar, $1::varchar, $2::timestamptz, 'running', $3::varchar, clock_timestamp()
WHERE CASE ` + pgClaimWhen(t, "$4", "$1", "$2") + ` ELSE true END`
	}
	var started time.Time
	err := q.QueryRowContext(ctx, `INSERT INTO `+t.q+` AS r (namespace, job, slot, status, owner, started_at)
`+insert+`
ON CONFLICT (namespace, job, slot) DO UPDATE
SET status = 'running', owner = EXCLUDED.owner, started_at = EXCLUDED.started_at, finished_at = NULL, error = NULL
WHERE r.status NOT IN ('done', 'skipped')
RETURNING started_at`, job, slot, owner, ns).Scan(&started)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return time.Time{}, false, nil
	case err != nil:
		return time.Time{}, false, t.wrap("claim", err)
	}
	return started, true, nil
}

// pgClaimWhen is the claim's test of the pause flag, in the order a CASE
// keeps: a slot done is not taken (nothing raised); else a paused job's
// raises (reading a setting that does not exist, SQLSTATE 42704 naming
// pgPausedSetting), which fails the statement and its transaction, and the
// caller records the slot skipped (pause.go) — a slot another replica
// already recorded skipped is left as it is, and this replica reports the
// pause too, as MySQL/MariaDB's read-back does; a skipped slot of a job
// that is not paused is left by the ON CONFLICT's condition. ns, job and
// slot are the statement's parameters or literals.
func pgClaimWhen(t *Table, ns, job, slot string) string {
	return `WHEN EXISTS (SELECT 1 FROM ` + t.q + ` d WHERE d.namespace = ` + ns + ` AND d.job = ` + job + ` AND d.slot = ` + slot +
		` AND d.status = 'done') THEN false
WHEN EXISTS (SELECT 1 FROM ` + t.cq + ` c WHERE c.namespace = ` + ns + ` AND c.kind = 'job' AND c.name = ` + job +
		` AND c.paused) THEN current_setting('` + pgPausedSetting + `')::bool`
}

func (pgLedger) finishSQL(t *Table) string {
	return `UPDATE ` + t.q + ` SET status = $1, finished_at = clock_timestamp(), error = $2
WHERE job = $3 AND slot = $4 AND status = 'running' AND owner = $5 AND started_at = $6 AND namespace = $7`
}

func (pgLedger) abandonSQL(t *Table) string {
	return `UPDATE ` + t.q + ` SET status = 'failed', finished_at = clock_timestamp(), error = $1
WHERE namespace = $2 AND job = $3 AND slot = $4 AND status = 'running' AND owner = $5`
}

func (pgLedger) selectRows(t *Table) string {
	return `SELECT namespace, job, slot, status, owner, started_at, finished_at, error FROM ` + t.q
}

func (pgLedger) scanRow(scan func(dest ...any) error, r *Row) error {
	var finished sql.NullTime
	var errText sql.NullString
	if err := scan(&r.Namespace, &r.Job, &r.Slot, &r.Status, &r.Owner, &r.Started, &finished, &errText); err != nil {
		return err
	}
	r.Finished, r.Error = finished.Time, errText.String
	return nil
}

func (l pgLedger) runsSQL(t *Table) string {
	return l.selectRows(t) + ` WHERE namespace = $1 AND job = $2 ORDER BY slot DESC LIMIT $3`
}

func (l pgLedger) rowSQL(t *Table) string {
	return l.selectRows(t) + ` WHERE namespace = $1 AND job = $2 AND slot = $3`
}

func (pgLedger) serverNowSQL() string { return "SELECT clock_timestamp()" }

func (pgLedger) scanTime(t *Table, scan func(dest ...any) error) (time.Time, error) {
	var v time.Time
	if err := scan(&v); err != nil {
		return time.Time{}, t.wrap("read the server's clock", err)
	}
	return v.UTC(), nil
}

func (pgLedger) takenSQL(t *Table) string {
	return `SELECT c.server_now, slot FROM (SELECT clock_timestamp() AS server_now) c LEFT JOIN ` + t.q +
		` ON namespace = $1 AND job = $2 AND slot >= $3 AND slot <= $4 AND status <> 'failed'`
}

func (pgLedger) scanTaken(t *Table, scan func(dest ...any) error, server *time.Time) (time.Time, bool, error) {
	var s sql.NullTime
	if err := scan(server, &s); err != nil {
		return time.Time{}, false, t.wrap(takenWhat, err)
	}
	return s.Time, s.Valid, nil
}

// pruneFinishedSQL: the outer status test is re-checked on a row claimed
// meanwhile.
func (pgLedger) pruneFinishedSQL(t *Table) string {
	return `DELETE FROM ` + t.q + ` WHERE (namespace, job, slot) IN (
	SELECT namespace, job, slot FROM ` + t.q + ` WHERE namespace = $1 AND slot < $2 AND status <> 'running' LIMIT $3
) AND status <> 'running'`
}

func (l pgLedger) pruneStaleSQL(t *Table) (next, del string) {
	return l.selectRows(t) + ` WHERE namespace = $1 AND status = 'running' AND slot < $2 AND (slot, job) > ($3, $4) ORDER BY slot, job LIMIT $5`,
		`DELETE FROM ` + t.q + ` WHERE namespace = $1 AND job = $2 AND slot = $3 AND status = 'running' AND owner = $4 AND started_at = $5`
}

func (pgLedger) hasIndexSQL(t *Table) (string, any) {
	return `SELECT COUNT(*) FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_am am ON am.oid = c.relam AND am.amname = 'btree'
JOIN pg_attribute a0 ON a0.attrelid = i.indrelid AND a0.attnum = i.indkey[0] AND a0.attname = 'namespace'
JOIN pg_attribute a1 ON a1.attrelid = i.indrelid AND a1.attnum = i.indkey[1] AND a1.attname = 'slot'
WHERE i.indrelid = to_regclass($1) AND i.indisvalid AND i.indpred IS NULL`, t.q
}

func (pgLedger) addIndexSQL(t *Table) string {
	return "CREATE INDEX " + t.s.Quote(t.IndexName()) + " ON " + t.q + " (namespace, slot)"
}

// hasNamespaceSQL: to_regclass resolves the quoted name through the
// search_path, as the ledger's own statements do.
func (pgLedger) hasNamespaceSQL(t *Table) (string, any) {
	return `SELECT COUNT(*) FROM pg_attribute
WHERE attrelid = to_regclass($1) AND attname = 'namespace' AND NOT attisdropped`, t.q
}

func (pgLedger) addNamespace(ctx context.Context, t *Table, q lockproto.Querier) error {
	var pkey string
	err := q.QueryRowContext(ctx, `SELECT conname FROM pg_constraint WHERE conrelid = to_regclass($1) AND contype = 'p'`, t.q).Scan(&pkey)
	if err != nil {
		return errs.Wrap(err, "ledger table %q: find its primary key", t.name)
	}
	_, err = q.ExecContext(ctx, `ALTER TABLE `+t.q+` ADD COLUMN namespace varchar(128) NOT NULL DEFAULT '', `+
		`DROP CONSTRAINT "`+strings.ReplaceAll(pkey, `"`, `""`)+`", ADD PRIMARY KEY (namespace, job, slot)`)
	if err != nil {
		return errs.Wrap(err, "ledger table %q: add the namespace column", t.name)
	}
	return nil
}

// claimText is claim's statement with literals (pgText, pgTime), for the
// message that begins the transaction and takes the lock (lockproto's
// pgthen.go): a statement of its own after the lock's, so that at READ
// COMMITTED its snapshot sees the previous holder's commit. It claims
// nothing in a transaction whose snapshot was taken before the lock
// (REPEATABLE READ or SERIALIZABLE as the server's default, which lockproto
// then gives back and takes by the split protocol): there, taking over a
// row changed since the snapshot would fail with a serialization error.
// Its command tag says whether it claimed (INSERT 0 1) or found the slot
// done (INSERT 0 0).
func (pgLedger) claimText(t *Table, ns, job string, slot time.Time, owner string, ctl bool) string {
	where := `WHERE current_setting('transaction_isolation') NOT IN ('repeatable read', 'serializable')`
	if ctl {
		// the isolation first: a CASE tests in order
		where = `WHERE CASE WHEN current_setting('transaction_isolation') IN ('repeatable read', 'serializable') THEN false
` + pgClaimWhen(t, pgText(ns), pgText(job), pgTime(slot)) + ` ELSE true END`
	}
	return `INSERT INTO ` + t.q + ` AS r (namespace, job, slot, status, owner, started_at)
SELECT ` + pgText(ns) + `, ` + pgText(job) + `, ` + pgTime(slot) + `, 'running', ` + pgText(owner) + `, clock_timestamp()
` + where + `
ON CONFLICT (namespace, job, slot) DO UPDATE
SET status = 'running', owner = EXCLUDED.owner, started_at = EXCLUDED.started_at, finished_at = NULL, error = NULL
WHERE r.status NOT IN ('done', 'skipped')`
}

// doneText marks done the claim of claimText, made in this same
// transaction (its row is locked by it until COMMIT, so no other run can
// have taken it over: started_at need not be matched).
func (pgLedger) doneText(t *Table, ns, job string, slot time.Time, owner string) string {
	return `UPDATE ` + t.q + ` SET status = 'done', finished_at = clock_timestamp(), error = NULL
WHERE namespace = ` + pgText(ns) + ` AND job = ` + pgText(job) + ` AND slot = ` + pgTime(slot) +
		` AND status = 'running' AND owner = ` + pgText(owner)
}

// pgText is s as a string literal that reads the same whatever the
// session's settings and that the planner folds to a constant of the
// compared column's type, so that the ledger's primary key is searched on
// every key column (a function of a constant, such as convert_from of a hex
// decode, is compared as text and is no index condition of a varchar
// column: the statement scanned the ledger). The form is an escape string
// (E'...', read alike with standard_conforming_strings on or off) of
// ASCII text only: printable ASCII as itself, a quote doubled, a
// backslash escaped, every other character a Unicode escape (\uXXXX or
// \UXXXXXXXX), which the server reads as that character in its own
// encoding, so neither the client encoding nor the connection's settings
// change the text. Callers pass valid UTF-8 without NUL (ValidateJob, the
// owner's and namespace's checks); anything else keeps the hex form, which
// the server refuses as it refuses the bound parameter.
func pgText(s string) string {
	if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
		return "convert_from(decode('" + hex.EncodeToString([]byte(s)) + "', 'hex'), 'UTF8')"
	}
	b := make([]byte, 0, len(s)+3)
	b = append(b, "E'"...)
	for _, r := range s {
		switch {
		case r == '\'':
			b = append(b, "''"...)
		case r == '\\':
			b = append(b, `\\`...)
		case r >= 0x20 && r < 0x7f:
			b = append(b, byte(r))
		case r < 0x10000:
			b = append(b, `\u`...)
			b = appendHex(b, uint32(r), 4)
		default:
			b = append(b, `\U`...)
			b = appendHex(b, uint32(r), 8)
		}
	}
	return string(append(b, '\''))
}

// appendHex appends v as n upper-case hex digits.
func appendHex(b []byte, v uint32, n int) []byte {
	for i := n - 1; i >= 0; i-- {
		b = append(b, "0123456789ABCDEF"[v>>(4*uint(i))&0xf])
	}
	return b
}

// pgTime is a slot (UTC, whole seconds, years 1000 to 9999: ValidateSlot)
// as a timestamptz literal in ISO 8601, which every DateStyle reads alike.
func pgTime(slot time.Time) string {
	return "'" + slot.UTC().Format("2006-01-02 15:04:05.999999") + "+00'::timestamptz"
}
