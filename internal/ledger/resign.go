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
	"github.com/ormlock/ormlock/internal/schema"
	"github.com/ormlock/ormlock/internal/status"
)

// Asking a leader to step down (ormlock.ActionResign): Resign writes the
// key's 'lead' row of the controls table, and every Lead of the key polls
// that row (ResignReader, resignpoll.go). docs/OPERATIONS.md (Leaders)
// describes them.

const (
	// leadKind is the kind of a leader key's row of the controls table.
	leadKind = "lead"
	// maxKeyText is the longest key text the controls table's name
	// column holds, in characters.
	maxKeyText = 255
)

// MaxResignCooldown bounds a resign's Cooldown.
const MaxResignCooldown = 24 * time.Hour

// checkResign checks what a resign asks beyond its author (CheckAuthor):
// a valid one-key key whose text fits the controls table, a cooldown in
// 0..MaxResignCooldown.
func checkResign(verb string, a status.Action) error {
	why := ""
	switch text := a.Key.String(); {
	case a.Key.Validate() != nil:
		return fmt.Errorf("%w: %s: resign: %w", errs.ErrInvalidArgument, verb, a.Key.Validate())
	case keys.IsShape(a.Key) || keys.IsRate(a.Key):
		why = fmt.Sprintf("key %s is a shape or a rate; a leader's key is one key", text)
	case utf8.RuneCountInString(text) > maxKeyText || !utf8.ValidString(text):
		why = fmt.Sprintf("key %.40q… is longer than %d characters or not UTF-8", text, maxKeyText)
	case a.Cooldown < 0 || a.Cooldown > MaxResignCooldown:
		why = fmt.Sprintf("the cooldown %v is not in 0..%v", a.Cooldown, MaxResignCooldown)
	default:
		return nil
	}
	return fmt.Errorf("%w: %s: resign: %s", errs.ErrInvalidArgument, verb, why)
}

// Resign carries out a, an ormlock.ActionResign whose author CheckAuthor
// checked, in namespace ns on db, the primary's pool, beside t. The
// key's holder is read first (holder: the adapter's Holder with the
// caller's options, whose mechanism it reads); nobody holding it is an
// error wrapping errs.ErrInvalidArgument and changes nothing. Then, in one
// transaction, the key's 'lead' row of the controls table is written
// (inserted or updated: resign_at the server's clock, resign_owner the
// holder's Owner, cooldown_ms a's Cooldown or config.DefaultResignCooldown,
// author, reason) and the action is appended to the actions log, whose
// entry is returned. Every Lead of the key polls that row (ResignReader);
// the one leading since before resign_at steps down.
func Resign(ctx context.Context, db *sql.DB, t *Table, verb, ns string, a status.Action, holder func(ctx context.Context) (lockproto.HolderInfo, error)) (status.ActionRecord, error) {
	if err := checkResign(verb, a); err != nil {
		return status.ActionRecord{}, err
	}
	if t.cq == "" || t.aq == "" {
		return status.ActionRecord{}, CtlOf(t).noControls(verb)
	}
	h, err := holder(ctx)
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
	ms := max(cooldown.Milliseconds(), 1) // 0 would read as the default
	r := status.ActionRecord{
		Namespace: ns, Kind: status.ActionResign, Key: a.Key.String(),
		Author: a.Author, Reason: a.Reason,
		Outcome: fmt.Sprintf("leader %s asked to step down; it stays out for %v", ownerText(h.Owner), cooldown),
	}
	err = inTx(ctx, db, func(tx *sql.Tx) error {
		now, err := t.ServerNow(ctx, tx)
		if err != nil {
			return err
		}
		rs := lockproto.PerServer[resignServer](t.s, pgResign{}, myResign{})
		if _, err := tx.ExecContext(ctx, rs.upsertSQL(t), r.Namespace, r.Key, t.slotArg(now), h.Owner, ms, r.Author, r.Reason, t.slotArg(now)); err != nil {
			return CtlOf(t).wrapCtl("write the leader's row", err)
		}
		if err := t.ctl.insertAction(ctx, t, tx, &r); err != nil {
			return CtlOf(t).wrapCtl("log the action", err)
		}
		return nil
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

// resignServer is the SQL of resigns on one family of servers.
type resignServer interface {
	// upsertSQL writes a key's 'lead' row (namespace, name, resign_at,
	// resign_owner, cooldown_ms, author, reason, changed_at).
	upsertSQL(t *Table) string
	// clockProbeSQL counts t's controls table and reads the server's
	// clock, with its argument.
	clockProbeSQL(t *Table) (string, any)
	// readSQL reads a key's 'lead' row (namespace, name): resign_at,
	// resign_owner, cooldown_ms, author, reason.
	readSQL(t *Table) string
	// scanTime reads a time column of clockProbeSQL or readSQL.
	scanTime(v any) (time.Time, error)
	// timeDest is what a time column scans into.
	timeDest() any
}

type pgResign struct{}

func (pgResign) upsertSQL(t *Table) string {
	return `INSERT INTO ` + t.cq + ` (namespace, kind, name, resign_at, resign_owner, cooldown_ms, author, reason, changed_at)
VALUES ($1, '` + leadKind + `', $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (namespace, kind, name) DO UPDATE SET resign_at = EXCLUDED.resign_at, resign_owner = EXCLUDED.resign_owner,
cooldown_ms = EXCLUDED.cooldown_ms, author = EXCLUDED.author, reason = EXCLUDED.reason, changed_at = EXCLUDED.changed_at`
}

func (pgResign) clockProbeSQL(t *Table) (string, any) {
	return `SELECT count(to_regclass($1)), clock_timestamp()`, t.cq
}

func (pgResign) readSQL(t *Table) string {
	return `SELECT resign_at, resign_owner, cooldown_ms, author, coalesce(reason, '') FROM ` + t.cq +
		` WHERE namespace = $1 AND kind = '` + leadKind + `' AND name = $2 AND resign_at IS NOT NULL`
}

func (pgResign) scanTime(v any) (time.Time, error) { return v.(*time.Time).UTC(), nil }
func (pgResign) timeDest() any                     { return new(time.Time) }

type myResign struct{}

func (myResign) upsertSQL(t *Table) string {
	return "INSERT INTO " + t.cq + ` (namespace, kind, name, resign_at, resign_owner, cooldown_ms, author, reason, changed_at)
VALUES (?, '` + leadKind + `', ?, ?, ?, ?, ?, ?, ?)
ON DUPLICATE KEY UPDATE resign_at = VALUES(resign_at), resign_owner = VALUES(resign_owner),
cooldown_ms = VALUES(cooldown_ms), author = VALUES(author), reason = VALUES(reason), changed_at = VALUES(changed_at)`
}

func (myResign) clockProbeSQL(t *Table) (string, any) {
	return `SELECT COUNT(*), DATE_FORMAT(UTC_TIMESTAMP(6), ` + mysqlFormat + `) FROM information_schema.TABLES
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?`, t.name + schema.ControlsSuffix
}

func (myResign) readSQL(t *Table) string {
	return "SELECT DATE_FORMAT(resign_at, " + mysqlFormat + "), resign_owner, cooldown_ms, author, COALESCE(reason, '') FROM " + t.cq +
		" WHERE namespace = ? AND kind = '" + leadKind + "' AND name = ? AND resign_at IS NOT NULL"
}

func (myResign) scanTime(v any) (time.Time, error) { return parseMySQLTime(*v.(*string)) }
func (myResign) timeDest() any                     { return new(string) }
