package ormlock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/fencectx"
)

// WithFencing makes every acquisition of the lock issue a fencing token: a
// number greater than every token issued before for the same key in the
// same namespace, never issued twice (not after a rollback, not after a
// server crash), which fn can read and attach to its writes so that a
// resource can refuse the writes of a holder that lost the lock without
// knowing it (a long GC pause, a stopped VM) once a later holder has
// written. It is off by default.
//
// The token is issued after the lock is held and committed on its own before
// fn runs, in the fence table that Migrate creates (the ledger table's name
// with "_fence" appended; "ormlock_runs_fence" by default). It costs one
// more statement per acquisition and one durable commit: on MySQL/MariaDB on
// the lock's own connection, between GET_LOCK and BEGIN; on PostgreSQL on a
// second connection of the pool, so that a pool of MaxOpenConns 1 is refused
// with [ErrInvalidArgument]. RunOnce's tokens count per job (all slots of a
// job share one counter). How fn reads the token: [FencingToken] on the
// context of a Session's fn (and of a claim-mode RunOnce's fn); on the
// transaction for the transactional verbs (gormlock.FencingToken,
// entlock.FencingToken). See docs/PROTOCOL.md, Fencing.
func WithFencing() Option { return func(c *config.Config) { c.Fencing = true } }

// FencingToken returns the fencing token of the lock that ctx was handed out
// under, when the verb ran with [WithFencing]: the ctx a Session's fn gets,
// and the context of a gormlock transaction (tx.Statement.Context).
func FencingToken(ctx context.Context) (int64, bool) { return fencectx.From(ctx) }

// ErrStaleToken is returned by [CheckFenced] when a fenced write changed no
// row: the resource has already seen a token at least as great, so the
// writer's lock was lost and another holder has written since.
var ErrStaleToken = errors.New("ormlock: stale fencing token")

// CheckFenced checks the outcome of a fenced write, an UPDATE that only
// matches while the resource's last token is smaller than the writer's:
//
//	res, err := db.ExecContext(ctx,
//		`UPDATE accounts SET balance = $1, fence = $2 WHERE id = $3 AND fence < $2`,
//		balance, token, id)
//	if err := ormlock.CheckFenced(res, err); err != nil { ... }
//
// It returns err when the statement failed, an error wrapping
// [ErrStaleToken] when no row was changed, and nil otherwise. The row must
// exist (insert it with fence 0 first); the UPDATE always changes the fence
// column when it matches, so the count is right on MySQL/MariaDB whatever
// the driver's clientFoundRows setting. See docs/PROTOCOL.md, Fencing, for
// the recipe and for guarding a store outside the database.
func CheckFenced(res sql.Result, err error) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return errs.Wrap(err, "fenced write: rows affected")
	}
	if n == 0 {
		return fmt.Errorf("%w: the resource has seen a newer holder's token; this holder's lock was lost", ErrStaleToken)
	}
	return nil
}
