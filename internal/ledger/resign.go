package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/status"
)

// Asking a leader to step down (ormlock.ActionResign): Resign writes the
// key's 'lead' row of the controls table, and every Lead of the key polls
// that row (ResignReader, resignpoll.go). The controls and actions tables
// are named after the ledger table (<ledger>_controls, <ledger>_actions)
// and created by Migrate; docs/OPERATIONS.md (Leaders) describes them.

const (
	// controlsSuffix and actionsSuffix name the controls table and the
	// actions log after the ledger table.
	controlsSuffix = "_controls"
	actionsSuffix  = "_actions"
	// leadKind is the kind of a leader key's row of the controls table.
	leadKind = "lead"
	// maxControlText is the longest author, owner or name the controls
	// table's varchar(255) columns hold, in characters.
	maxControlText = 255
)

// MaxResignCooldown bounds a resign's Cooldown.
const MaxResignCooldown = 24 * time.Hour

// controlTables returns the names of the controls table and the actions
// log of t, or an error naming the first whose name passes the 63 bytes of
// an identifier (such a ledger has neither table).
func controlTables(t *Table) (controls, actions string, err error) {
	for _, name := range []string{t.name + controlsSuffix, t.name + actionsSuffix} {
		if config.ValidIdentifier("", name) != nil {
			return "", "", fmt.Errorf("%w: ledger table %q has no controls table: %q passes the 63 bytes of an identifier (choose a shorter WithLedgerTable)", errs.ErrInvalidArgument, t.name, name)
		}
	}
	return t.name + controlsSuffix, t.name + actionsSuffix, nil
}

// CheckResign checks a resign action before anything is sent: a valid
// one-key key whose text fits the controls table, an author (at most 255
// characters of valid UTF-8), a reason of valid UTF-8, a cooldown in
// 0..MaxResignCooldown.
func CheckResign(verb string, a status.Action) error {
	why := ""
	switch text := a.Key.String(); {
	case a.Key.Validate() != nil:
		return fmt.Errorf("%w: %s: resign: %w", errs.ErrInvalidArgument, verb, a.Key.Validate())
	case keys.IsShape(a.Key) || keys.IsRate(a.Key):
		why = fmt.Sprintf("key %s is a shape or a rate; a leader's key is one key", text)
	case utf8.RuneCountInString(text) > maxControlText || !utf8.ValidString(text):
		why = fmt.Sprintf("key %.40q… is longer than %d characters or not UTF-8", text, maxControlText)
	case a.Author == "":
		why = "an action needs an Author (its By)"
	case utf8.RuneCountInString(a.Author) > maxControlText || !utf8.ValidString(a.Author):
		why = fmt.Sprintf("the author is longer than %d characters or not UTF-8", maxControlText)
	case !utf8.ValidString(a.Reason):
		why = "the reason is not UTF-8"
	case a.Cooldown < 0 || a.Cooldown > MaxResignCooldown:
		why = fmt.Sprintf("the cooldown %v is not in 0..%v", a.Cooldown, MaxResignCooldown)
	default:
		return nil
	}
	return fmt.Errorf("%w: %s: resign: %s", errs.ErrInvalidArgument, verb, why)
}

// Resign carries out a, an ormlock.ActionResign checked by CheckResign,
// on db, the primary's pool: op is the Holder lookup of a.Key with the
// caller's settings (namespace, ledger table, mechanism). The key's
// holder is read first (lockproto.LookupHolder); nobody holding it is an
// error wrapping errs.ErrInvalidArgument and changes nothing. Then, in one
// transaction, the key's 'lead' row of the controls table is written
// (inserted or updated: resign_at the server's clock, resign_owner the
// holder's Owner, cooldown_ms a's Cooldown or config.DefaultResignCooldown,
// author, reason) and the action is appended to the actions log, whose
// entry is returned. Every Lead of the key polls that row (ResignReader);
// the one leading since before resign_at steps down.
func Resign(ctx context.Context, db *sql.DB, op *lockproto.Op, verb string, a status.Action) (status.ActionRecord, error) {
	if err := CheckResign(verb, a); err != nil {
		return status.ActionRecord{}, err
	}
	t, err := NewTable(op.Dialect, op.Cfg.LedgerTable)
	if err != nil {
		return status.ActionRecord{}, err
	}
	controls, actions, err := controlTables(t)
	if err != nil {
		return status.ActionRecord{}, fmt.Errorf("%s: %w", verb, err)
	}
	h, err := lockproto.LookupHolder(ctx, db, op)
	if err != nil {
		return status.ActionRecord{}, err
	}
	if !h.Held {
		return status.ActionRecord{}, fmt.Errorf("%w: %s: resign: nobody holds %q, so no leader can be asked to step down", errs.ErrInvalidArgument, verb, a.Key.String())
	}
	cooldown := a.Cooldown
	if cooldown == 0 {
		cooldown = config.DefaultResignCooldown
	}
	r := status.ActionRecord{
		Namespace: op.Cfg.Namespace, Kind: status.ActionResign, Key: a.Key.String(),
		Author: a.Author, Reason: a.Reason,
		Outcome: fmt.Sprintf("leader %s asked to step down; it stays out for %v", ownerText(h.Owner), cooldown),
	}
	err = resignTx(ctx, db, func(tx *sql.Tx) error {
		if r.At, err = t.ServerNow(ctx, tx); err != nil {
			return err
		}
		rs := lockproto.PerServer[resignServer](t.s, pgResign{}, myResign{})
		q := resignTables{t: t, controls: t.s.Quote(controls), actions: t.s.Quote(actions)}
		if _, err := tx.ExecContext(ctx, rs.upsertSQL(q), r.Namespace, r.Key, t.slotArg(r.At), h.Owner, cooldown.Milliseconds(), r.Author, r.Reason, t.slotArg(r.At)); err != nil {
			return q.wrap(err, "write the leader's row")
		}
		r.ID, err = rs.logResign(ctx, tx, q, r, t.slotArg(r.At))
		return err
	})
	if err != nil {
		return status.ActionRecord{}, err
	}
	return r, nil
}

// ownerText is how an outcome names a holder's owner.
func ownerText(owner string) string {
	if owner == "" {
		return "(owner unknown)"
	}
	return fmt.Sprintf("%q", owner)
}

// resignTx runs f in a transaction of db, committed when f returns nil and
// rolled back otherwise (a panic included).
func resignTx(ctx context.Context, db *sql.DB, f func(tx *sql.Tx) error) (err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return errs.Wrap(err, "begin the action's transaction")
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback()
		}
	}()
	if err := f(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return errs.Wrap(err, "commit the action")
	}
	committed = true
	return nil
}

// resignTables is the quoted controls table and actions log of a ledger
// table.
type resignTables struct {
	t                 *Table
	controls, actions string
}

// wrap annotates an error of a statement on the controls tables, with a
// hint when they are missing.
func (q resignTables) wrap(err error, what string) error {
	if q.t.s.MissingTable(err) {
		return errs.Wrap(err, "the controls tables of ledger table %q do not exist (create them with Migrate): %s", q.t.name, what)
	}
	return errs.Wrap(err, "ledger table %q's controls: %s", q.t.name, what)
}

// resignServer is the SQL of resigns on one family of servers.
type resignServer interface {
	// upsertSQL writes a key's 'lead' row (namespace, name, resign_at,
	// resign_owner, cooldown_ms, author, reason, changed_at).
	upsertSQL(q resignTables) string
	// logResign appends r to the actions log at at and returns its id.
	logResign(ctx context.Context, tx *sql.Tx, q resignTables, r status.ActionRecord, at any) (int64, error)
	// probeSQL counts the tables named by its argument and reads the
	// server's clock.
	probeSQL(q resignTables) (string, any)
	// readSQL reads a key's 'lead' row (namespace, name): resign_at,
	// resign_owner, cooldown_ms, author, reason.
	readSQL(q resignTables) string
	// scanTime reads a time column of probeSQL or readSQL.
	scanTime(v any) (time.Time, error)
	// timeDest is what a time column scans into.
	timeDest() any
}

type pgResign struct{}

func (pgResign) upsertSQL(q resignTables) string {
	return `INSERT INTO ` + q.controls + ` (namespace, kind, name, resign_at, resign_owner, cooldown_ms, author, reason, changed_at)
VALUES ($1, '` + leadKind + `', $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (namespace, kind, name) DO UPDATE SET resign_at = EXCLUDED.resign_at, resign_owner = EXCLUDED.resign_owner,
cooldown_ms = EXCLUDED.cooldown_ms, author = EXCLUDED.author, reason = EXCLUDED.reason, changed_at = EXCLUDED.changed_at`
}

func (pgResign) logResign(ctx context.Context, tx *sql.Tx, q resignTables, r status.ActionRecord, at any) (int64, error) {
	var id int64
	err := tx.QueryRowContext(ctx, `INSERT INTO `+q.actions+` (namespace, kind, name, author, reason, outcome, at)
VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id`, r.Namespace, string(r.Kind), r.Key, r.Author, r.Reason, r.Outcome, at).Scan(&id)
	if err != nil {
		return 0, q.wrap(err, "log the action")
	}
	return id, nil
}

func (pgResign) probeSQL(q resignTables) (string, any) {
	return `SELECT count(to_regclass($1)), clock_timestamp()`, q.controls
}

func (pgResign) readSQL(q resignTables) string {
	return `SELECT resign_at, resign_owner, cooldown_ms, author, coalesce(reason, '') FROM ` + q.controls +
		` WHERE namespace = $1 AND kind = '` + leadKind + `' AND name = $2 AND resign_at IS NOT NULL`
}

func (pgResign) scanTime(v any) (time.Time, error) { return v.(*time.Time).UTC(), nil }
func (pgResign) timeDest() any                     { return new(time.Time) }

type myResign struct{}

func (myResign) upsertSQL(q resignTables) string {
	return "INSERT INTO " + q.controls + ` (namespace, kind, name, resign_at, resign_owner, cooldown_ms, author, reason, changed_at)
VALUES (?, '` + leadKind + `', ?, ?, ?, ?, ?, ?, ?)
ON DUPLICATE KEY UPDATE resign_at = VALUES(resign_at), resign_owner = VALUES(resign_owner),
cooldown_ms = VALUES(cooldown_ms), author = VALUES(author), reason = VALUES(reason), changed_at = VALUES(changed_at)`
}

func (myResign) logResign(ctx context.Context, tx *sql.Tx, q resignTables, r status.ActionRecord, at any) (int64, error) {
	res, err := tx.ExecContext(ctx, "INSERT INTO "+q.actions+` (namespace, kind, name, author, reason, outcome, at)
VALUES (?, ?, ?, ?, ?, ?, ?)`, r.Namespace, string(r.Kind), r.Key, r.Author, r.Reason, r.Outcome, at)
	if err != nil {
		return 0, q.wrap(err, "log the action")
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, q.wrap(err, "read the action's id")
	}
	return id, nil
}

func (myResign) probeSQL(q resignTables) (string, any) {
	return `SELECT COUNT(*), DATE_FORMAT(UTC_TIMESTAMP(6), ` + mysqlFormat + `) FROM information_schema.TABLES
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?`, q.t.name + controlsSuffix
}

func (myResign) readSQL(q resignTables) string {
	return "SELECT DATE_FORMAT(resign_at, " + mysqlFormat + "), resign_owner, cooldown_ms, author, COALESCE(reason, '') FROM " + q.controls +
		" WHERE namespace = ? AND kind = '" + leadKind + "' AND name = ? AND resign_at IS NOT NULL"
}

func (myResign) scanTime(v any) (time.Time, error) { return parseMySQLTime(*v.(*string)) }
func (myResign) timeDest() any                     { return new(string) }
