package lockproto

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/ormlock/ormlock/internal/errs"
)

// The nested protocol: PostgreSQL's transaction-level lock taken in a
// transaction the caller already has open, which releases it when it ends
// (COMMIT, ROLLBACK, or a ROLLBACK TO a savepoint taken before it), in a
// savepoint (InSavepoint): gormlock's nested call around the lock and fn,
// sqllock's and pgxlock's Lock around the lock alone (LockNested). Both
// check the transaction first (CheckNested).

// rowQuerier runs a query that returns one row: a *sql.DB, *sql.Conn or
// *sql.Tx (the server check's querier, or the caller's transaction).
type rowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// CheckNested is the check of a lock about to be taken in the caller's
// open transaction q (verb names the call in errors, "sqllock.Lock"). One
// statement reads the server's version, whether it is a standby and the
// transaction's isolation; it refuses:
//
//   - with errs.ErrUnsupportedDialect, a server whose locks exclude
//     nobody (CheckServer's verdicts, asked here of the transaction and
//     not cached: the caller's pool is out of reach), and a MySQL/MariaDB
//     server, which answers this PostgreSQL statement with an error of its
//     own (a failed statement does not end a MySQL transaction): its named
//     lock is the connection's, not the transaction's, so it would outlive
//     the caller's COMMIT or ROLLBACK;
//   - with errs.ErrInvalidArgument, a transaction above READ COMMITTED:
//     its snapshot was taken before the lock (at its first statement, at
//     the latest this one), so its reads could not see what the lock's
//     earlier holders committed.
//
// Nothing is taken before a refusal. An error of the statement itself goes
// through Abandon, as the server check's does.
func CheckNested(ctx context.Context, o *Op, q Querier, verb string) error {
	if r, ok := o.target.mech.(nestRefuser); ok {
		return r.refuseNested(o, verb)
	}
	var iso string
	verdict, err := checkPostgres(ctx, q, ", current_setting('transaction_isolation')", &iso)
	switch {
	case err != nil && MySQLErrno(err) != 0:
		return fmt.Errorf("%w: %s on MySQL/MariaDB: a named lock (GET_LOCK) belongs to the connection, not to its transaction, so it would outlive the transaction's COMMIT or ROLLBACK; take it with Transaction, which begins the transaction after the lock and releases the lock after the commit",
			errs.ErrUnsupportedDialect, verb)
	case err != nil:
		return o.Abandon(ctx, err)
	}
	facts, err := verdict()
	if err == nil {
		err = facts.fake(o)
	}
	if err != nil {
		return err
	}
	o.use.server = facts.product // the events' Server, with no pool to cache it under
	if _, snapshot := snapshotLevel(iso); snapshot {
		return fmt.Errorf("%w: %s on %q inside a %s transaction: its snapshot was taken before the lock, so its reads could not see the commits of the lock's earlier holders; take the lock in a READ COMMITTED transaction, or with Transaction outside any transaction (any isolation works there)",
			errs.ErrInvalidArgument, verb, o.Key.String(), strings.ToUpper(iso))
	}
	return nil
}

// nestedSavepoint is the savepoint a nested lock is taken in.
const nestedSavepoint = "ormlock_lock"

// InSavepoint runs body in a savepoint of the caller's open transaction q
// (a nested call's lock, and gormlock's fn with it), which is released
// when body returns nil and rolled back to otherwise (a panic too,
// re-raised): a lock body took, and its work, are then given back, and a
// statement that failed in it (a lock wait that timed out aborts what it
// ran in) no longer aborts the transaction, which goes on as it was, unless
// its connection failed. The end statements run on a context of their own,
// cut endGrace after ctx ended (releaseWithin), so that a body that ended
// with ctx still rolls back what it did. A savepoint of the same name
// inside it (a nested call in body) is ended before it, as PostgreSQL
// ends savepoints, by name, the latest first.
func InSavepoint(ctx context.Context, o *Op, q Querier, body func() error) (err error) {
	if _, err := q.ExecContext(ctx, "SAVEPOINT "+nestedSavepoint); err != nil {
		return o.Abandon(ctx, errs.Wrap(err, "savepoint before the lock"))
	}
	done := false
	defer func() {
		end := []string{"RELEASE SAVEPOINT " + nestedSavepoint}
		if !done || err != nil {
			end = append([]string{"ROLLBACK TO SAVEPOINT " + nestedSavepoint}, end...)
		}
		eerr := releaseWithin(ctx, func(rctx context.Context) error {
			for _, stmt := range end {
				if _, err := q.ExecContext(rctx, stmt); err != nil {
					return errs.Wrap(err, "%s", stmt)
				}
			}
			return nil
		})
		if done { // a panic goes on as it was
			err = errs.Join(err, eerr)
		}
	}()
	err = body()
	done = true
	return err
}

// LockNested takes o's lock (one key or a shape, try once or wait) in the
// caller's open transaction q, which CheckNested passed, in a savepoint
// (InSavepoint): released once the lock is held, so that the lock is then
// the transaction's; rolled back to on any other outcome (held elsewhere,
// a wait that timed out, a lock that came as ctx ended, an All refused at
// a later key), which leaves the transaction as it was. When q is a
// *sql.Conn of pgx's driver (pgxlock's view of the caller's pgx.Tx), a
// cancellation of ctx during a lock statement asks the server (stmtCtx),
// so that the connection survives it.
func LockNested(ctx context.Context, o *Op, q Querier) error {
	if c, ok := q.(*sql.Conn); ok {
		o.cancel = pgCancelOf(c)
		defer func() { o.cancel = nil }()
	}
	return InSavepoint(ctx, o, q, func() error { return pgMech.acquireXact(ctx, o, q, nil) })
}
