package pgxlock

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/verbs"
)

// Lock takes the lock named by key in tx, a transaction the caller began
// and ends (pgx.BeginFunc, pool.Begin, sqlc's WithTx), and returns nil once
// it is held: PostgreSQL's transaction-level lock, which tx's Commit or
// Rollback releases (so does the Rollback of a savepoint, tx.Begin, taken
// before it), with the keys and shapes of the other verbs. It tries once
// ([ormlock.ErrNotAcquired] when the lock is held) unless
// [ormlock.WithWait] is given; after ErrNotAcquired, or any failure but
// that of tx's connection, tx is as it was and may go on (the lock is
// taken in a savepoint, rolled back to on failure; a cancellation of ctx
// under way is asked of the server, which leaves the connection usable).
// tx must be at READ COMMITTED (PostgreSQL's default): above it, tx's
// snapshot predates the lock and Lock returns [ormlock.ErrInvalidArgument].
// [ormlock.WithFencing], [ormlock.WithTxOptions], [ormlock.WithClaim] and
// [ormlock.WithCatchUp] cannot be honoured in tx: ErrInvalidArgument. Its
// statements follow tx's connection's default_query_exec_mode, as fn's
// do (Behind PgBouncer). See the package doc (A lock in your transaction)
// and docs/PROTOCOL.md (Nested calls).
func Lock[K ormlock.KeyType](ctx context.Context, tx pgx.Tx, key K, opts ...ormlock.Option) error {
	return verbs.Lock(ctx, txBinder{tx}, pkg, keys.Of[ormlock.Key](key), opts)
}

// txBinder is pgxlock's binding of Lock: the protocol runs its statements
// on a database/sql view of the caller's pgx.Tx (txView), opened for the
// call and closed when it returns.
type txBinder struct{ tx pgx.Tx }

func (b txBinder) Nil() string { return verbs.NilIf(b.tx == nil, "pgx.Tx") }

func (b txBinder) Bind(ctx context.Context, _ string, opts []config.Option) (verbs.Pool, error) {
	db := sql.OpenDB(txConnector(b))
	// the view's one connection sends nothing to open: a context that has
	// ended is left to the verb core, which then sends nothing either
	conn, err := db.Conn(context.WithoutCancel(ctx))
	if err != nil {
		_ = db.Close()
		return verbs.Pool{}, err
	}
	return verbs.Pool{
		Pkg: pkg, Dialect: lockproto.Postgres, Cfg: config.New(opts...), Tx: conn, NoCheck: true, Mend: mend,
		Close: func() {
			_ = conn.Close()
			_ = db.Close()
		},
	}, nil
}

// The view: a database/sql connector whose one connection runs its
// statements on a pgx.Tx (the protocol speaks database/sql). It begins,
// prepares and closes nothing: the transaction and its connection are the
// caller's. Its Conn makes it one of pgx's driver's connections to the
// protocol, which can then ask the server to cancel a lock statement.

type txConnector struct{ tx pgx.Tx }

func (c txConnector) Connect(context.Context) (driver.Conn, error) { return txConn(c), nil }
func (c txConnector) Driver() driver.Driver                        { return stdlib.GetDefaultDriver() }

type txConn struct{ tx pgx.Tx }

var errTxView = errors.New("ormlock: pgxlock: the view of the caller's transaction runs statements only")

func (c txConn) Prepare(string) (driver.Stmt, error) { return nil, errTxView }
func (c txConn) Begin() (driver.Tx, error)           { return nil, errTxView }
func (c txConn) Close() error                        { return nil }

// Conn is tx's pgx connection, which internal/pgxdriver finds behind a
// *sql.Conn (the wire of the lock statements, their cancellation).
func (c txConn) Conn() *pgx.Conn { return c.tx.Conn() }

// CheckNamedValue hands every argument to pgx as it is.
func (c txConn) CheckNamedValue(*driver.NamedValue) error { return nil }

func (c txConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	tag, err := c.tx.Exec(ctx, query, values(args)...)
	if err != nil {
		return nil, err
	}
	return driver.RowsAffected(tag.RowsAffected()), nil
}

func (c txConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	rows, err := c.tx.Query(ctx, query, values(args)...)
	if err != nil {
		return nil, err
	}
	return txRows{rows}, nil
}

func values(args []driver.NamedValue) []any {
	vs := make([]any, len(args))
	for i, a := range args {
		vs[i] = a.Value
	}
	return vs
}

type txRows struct{ rows pgx.Rows }

func (r txRows) Columns() []string {
	fds := r.rows.FieldDescriptions()
	cols := make([]string, len(fds))
	for i, fd := range fds {
		cols[i] = fd.Name
	}
	return cols
}

func (r txRows) Close() error {
	r.rows.Close()
	return r.rows.Err()
}

func (r txRows) Next(dest []driver.Value) error {
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return io.EOF
	}
	vs, err := r.rows.Values()
	if err != nil {
		return err
	}
	for i := range dest {
		dest[i] = driverValue(vs[i])
	}
	return nil
}

// driverValue is v, as pgx decoded it, as one of database/sql's driver
// values (the protocol reads booleans, integers and text).
func driverValue(v any) driver.Value {
	switch v := v.(type) {
	case nil, bool, int64, float64, string, []byte, time.Time:
		return v
	case int32:
		return int64(v)
	case int16:
		return int64(v)
	case uint32:
		return int64(v)
	case float32:
		return float64(v)
	}
	return v
}
