package sqllock

import (
	"database/sql"

	"github.com/ormlock/ormlock/internal/errs"
)

// CheckFenced is [ormlock.CheckFenced] for database/sql, as gormlock's and
// pgxlock's are for theirs: it checks the outcome of a fenced write sent
// with ExecContext ("UPDATE t SET ..., fence = $1 WHERE id = $2 AND fence
// <= $1"). It returns err when the statement failed, an error wrapping
// [ormlock.ErrStaleToken] when it matched no row, and nil otherwise. The
// holder may write the row again under the same token (fence <= token);
// only smaller tokens are refused. On MySQL/MariaDB the DSN needs
// clientFoundRows=true for a write that changes nothing to count, and a
// refusal from go-sql-driver/mysql says so. See docs/PROTOCOL.md (Fenced
// writes).
//
//	tok, _ := ormlock.FencingToken(ctx)
//	err := sqllock.CheckFenced(tx.ExecContext(ctx,
//		"UPDATE accounts SET balance = ?, fence = ? WHERE id = ? AND fence <= ?", b, tok, id, tok))
func CheckFenced(res sql.Result, err error) error {
	return errs.CheckFencedOn(errs.ResultDialect(res), err, func() (int64, error) { return res.RowsAffected() })
}
