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
// (COMMIT, ROLLBACK, or a ROLLBACK TO a savepoint taken before it).
// gormlock's nested call takes it in the savepoint GORM makes around fn
// (AcquireXact); sqllock's and pgxlock's Lock in a savepoint of its own
// (LockNested). Both check the transaction first (CheckNested).

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
func (o *Op) CheckNested(ctx context.Context, q Querier, verb string) error {
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

// nestedSavepoint is the savepoint LockNested takes the lock in.
const nestedSavepoint = "ormlock_lock"

// LockNested takes o's lock (one key or a shape, try once or wait) in the
// caller's open transaction q, which CheckNested passed: in a savepoint,
// released once the lock is held, so that the lock is then the
// transaction's. Any other outcome (held elsewhere, a wait that timed out,
// which aborts what it ran in, a lock that came as ctx ended, an All
// refused at a later key) rolls back to the savepoint, which gives back
// whatever was taken and leaves the transaction as it was, usable, unless
// its connection failed. When q is a *sql.Conn of pgx's driver (pgxlock's
// view of the caller's pgx.Tx), a cancellation of ctx during a lock
// statement asks the server (stmtCtx), so that the connection survives it.
func (o *Op) LockNested(ctx context.Context, q Querier) error {
	if c, ok := q.(*sql.Conn); ok {
		o.cancel = pgCancelOf(c)
		defer func() { o.cancel = nil }()
	}
	if _, err := q.ExecContext(ctx, "SAVEPOINT "+nestedSavepoint); err != nil {
		return o.Abandon(ctx, errs.Wrap(err, "savepoint before the lock"))
	}
	err := o.acquireXact(ctx, q, nil)
	end := []string{"RELEASE SAVEPOINT " + nestedSavepoint}
	if err != nil {
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
	return errs.Join(err, eerr)
}
