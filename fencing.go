package ormlock

import (
	"context"
	"database/sql"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
)

// WithFencing makes every acquisition of the lock issue a fencing token,
// greater than every token issued before for its key and namespace, never
// issued twice, and committed before fn runs, so that a resource can refuse
// the writes of a holder that lost its lock without knowing it. It is off by
// default. It needs the fence table of Migrate and costs one statement per
// acquisition; on PostgreSQL it takes a second connection of the pool (a pool
// of MaxOpenConns 1 is refused with [ErrInvalidArgument]). fn reads the token
// with [FencingToken] or the adapters' own. See docs/PROTOCOL.md (Fencing).
func WithFencing() Option { return func(c *config.Config) { c.Fencing = true } }

// FencingToken returns the fencing token of the lock that ctx was handed out
// under, when the verb ran with [WithFencing]: the ctx a Session's fn gets,
// and the context of a gormlock transaction (tx.Statement.Context).
func FencingToken(ctx context.Context) (int64, bool) { return config.Token(ctx) }

// ErrStaleToken is returned by [CheckFenced] when a fenced write matched no
// row: the row's fence is greater than the writer's token, so a holder with
// a greater token has written it since (the writer's lock was lost), or
// the row does not exist.
var ErrStaleToken = errs.ErrStaleToken

// CheckFenced checks the outcome of a fenced write, an UPDATE that only
// matches while the resource's last token is at most the writer's
// ("UPDATE t SET ..., fence = $tok WHERE id = $id AND fence <= $tok"), so a
// holder writes the row as often as it likes under its token and only
// smaller tokens are refused. It returns err when the statement failed, an
// error wrapping [ErrStaleToken] when no row matched, and nil otherwise.
// The row must exist first (with fence 0). On MySQL/MariaDB an UPDATE
// reports the rows it changed, not those it matched, unless the DSN sets
// clientFoundRows=true: without it a repeated write of the same values is
// taken for a stale one, and the error (from go-sql-driver/mysql) names
// that cause. See docs/PROTOCOL.md (Fenced writes).
func CheckFenced(res sql.Result, err error) error {
	return errs.CheckFencedOn(errs.ResultDialect(res), err, func() (int64, error) { return res.RowsAffected() })
}
