package lockproto

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"reflect"

	"github.com/ormlock/ormlock/internal/errs"
)

// ErrImplicitCommit is the error of a MySQL/MariaDB transaction that was
// committed behind the library's back while fn ran: the server commits the
// open transaction before any DDL statement (CREATE, ALTER, DROP, TRUNCATE,
// ...), so a ROLLBACK after it undoes nothing written before it. It is
// errs.ErrImplicitCommit, the same value (internal/errs holds it).
var ErrImplicitCommit = errs.ErrImplicitCommit

// errNoStatus says that the driver's reply status is not readable.
var errNoStatus = errors.New("no status flags")

// mysqlStatusInTrans is SERVER_STATUS_IN_TRANS of the MySQL protocol.
const mysqlStatusInTrans = 1

// mysqlInTx reports whether the MySQL/MariaDB session of the transaction
// q, on the pinned connection conn (nil when unknown), still has its
// transaction open. With go-sql-driver/mysql it reads the server status
// flags of the last reply, which the driver keeps (an unexported field,
// read by reflection without importing the driver): no round trip. Any
// other driver, or a driver whose field is not found, costs one: SELECT
// @@in_transaction on q.
func mysqlInTx(ctx context.Context, conn *sql.Conn, q Querier) (bool, error) {
	if conn != nil {
		var in bool
		err := conn.Raw(func(dc any) error {
			v := reflect.ValueOf(DriverConn(dc))
			if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
				return errNoStatus
			}
			f := v.Elem().FieldByName("status")
			if !f.IsValid() || f.Kind() != reflect.Uint16 || v.Elem().Type().PkgPath() != "github.com/go-sql-driver/mysql" {
				return errNoStatus
			}
			in = f.Uint()&mysqlStatusInTrans != 0
			return nil
		})
		if err == nil {
			return in, nil
		}
	}
	var in int64
	if err := q.QueryRowContext(ctx, "SELECT @@in_transaction").Scan(&in); err != nil {
		return false, errs.Wrap(err, "read @@in_transaction")
	}
	return in != 0, nil
}

// MySQLImplicitCommit reports, on MySQL/MariaDB, whether the transaction q
// was committed implicitly (see ErrImplicitCommit); false on an error
// reading it, and on PostgreSQL. The ledger calls it only after a failed
// fn. When q is the transaction this Op's BeginLocked gave, it reads the
// server status of q's pinned connection, as Commit and Rollback do (no
// round trip with go-sql-driver/mysql, and right on Oracle MySQL, which
// has no @@in_transaction); otherwise it asks SELECT @@in_transaction.
func (o *Op) MySQLImplicitCommit(ctx context.Context, q Querier) bool {
	var conn *sql.Conn
	if o.mysqlTx != nil && o.mysqlTx.Tx == q {
		conn = o.mysqlTx.conn
	}
	return o.Dialect.server().implicitCommit(ctx, conn, q)
}

// implicitCommit reports whether t's MySQL/MariaDB transaction was
// committed implicitly while fn ran (false on PostgreSQL, and when it
// cannot be read: the connection broke, which the end then reports).
func (t *LockedTx) implicitCommit() bool {
	if t.conn == nil {
		return false
	}
	return t.op.Dialect.server().implicitCommit(context.WithoutCancel(t.ctx), t.conn, t.Tx)
}

// warnImplicitCommit reports on slog.Default() a transaction that fn
// committed implicitly and that then succeeded: its writes are all
// committed, but not atomically.
func (t *LockedTx) warnImplicitCommit() {
	slog.Default().LogAttrs(context.WithoutCancel(t.ctx), slog.LevelWarn,
		"ormlock: the transaction was committed implicitly while fn ran (MySQL/MariaDB commits before a DDL statement): fn's writes are committed, but not as one transaction; run a job that needs DDL with ormlock.WithClaim",
		slog.String("verb", t.op.Verb), slog.String("key", t.op.Key.String()), slog.String("job", t.op.Job))
}

// Reported reports whether rerr, the error of a Rollback after fn failed
// with ferr, says something the caller must hear beside ferr: the lock
// was lost (errs.ErrLockLost), or the transaction had been committed
// implicitly (ErrImplicitCommit) and ferr does not say so already.
func Reported(rerr, ferr error) bool {
	if errors.Is(rerr, errs.ErrLockLost) {
		return true
	}
	return errors.Is(rerr, ErrImplicitCommit) && !errors.Is(ferr, ErrImplicitCommit)
}
