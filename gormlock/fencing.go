package gormlock

import (
	"database/sql"
	"fmt"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/errs"
)

// FencingToken returns the fencing token of the lock under which tx was
// handed to fn, when the verb ran with [ormlock.WithFencing]: the tx of
// [Transaction] and of [RunOnce] (both modes). It reads tx.Statement.Context,
// so a tx.WithContext with a context not derived from it loses the token; a
// Session's fn reads it with [ormlock.FencingToken] on its ctx. Check a
// fenced write with [CheckFenced]. See docs/PROTOCOL.md (Fencing).
func FencingToken(tx *gorm.DB) (int64, bool) {
	if tx == nil || tx.Statement == nil || tx.Statement.Context == nil {
		return 0, false
	}
	return ormlock.FencingToken(tx.Statement.Context)
}

// TokenDB is the primary's pool under db's transaction, where the token of
// a nested call's lock is committed (verbs.Nester).
func (d driver) TokenDB() (*sql.DB, error) { return primarySQL(d.db) }

// CheckFenced is [ormlock.CheckFenced] for a GORM statement: it returns
// r.Error when the statement failed, an error wrapping
// [ormlock.ErrStaleToken] when it matched no row, and nil otherwise. The
// holder may write the row again under the same token (fence <= token); on
// MySQL/MariaDB the DSN needs clientFoundRows=true for a write that changes
// nothing to count (see docs/PROTOCOL.md, Fenced writes).
//
//	tok, _ := gormlock.FencingToken(tx)
//	err := gormlock.CheckFenced(tx.Exec(
//		"UPDATE accounts SET balance = ?, fence = ? WHERE id = ? AND fence <= ?", b, tok, id, tok))
func CheckFenced(r *gorm.DB) error {
	if r == nil {
		return fmt.Errorf("%w: gormlock.CheckFenced: nil *gorm.DB", ormlock.ErrInvalidArgument)
	}
	return errs.CheckFencedOn(dialectName(r), r.Error, func() (int64, error) { return r.RowsAffected, nil })
}

// dialectName is the name of r's dialector ("postgres", "mysql"), "" when
// it has none.
func dialectName(r *gorm.DB) string {
	if r.Config != nil && r.Dialector != nil {
		return r.Dialector.Name()
	}
	return ""
}
