package pgxlock

import (
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/ormlock/ormlock/internal/errs"
)

// CheckFenced is [ormlock.CheckFenced] for pgx: it checks the outcome of a
// fenced write sent with Exec ("UPDATE t SET ..., fence = $1 WHERE id = $2
// AND fence <= $1"). It returns err when the statement failed, an error
// wrapping [ormlock.ErrStaleToken] when it matched no row, and nil
// otherwise. The holder may write the row again under the same token
// (fence <= token); only smaller tokens are refused. See docs/PROTOCOL.md
// (Fenced writes).
//
//	tok, _ := ormlock.FencingToken(ctx)
//	err := pgxlock.CheckFenced(tx.Exec(ctx, "UPDATE accounts SET balance = $1, fence = $2 WHERE id = $3 AND fence <= $2", b, tok, id))
func CheckFenced(tag pgconn.CommandTag, err error) error {
	return errs.CheckFencedOn("postgres", err, func() (int64, error) { return tag.RowsAffected(), nil })
}
