package lockproto

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The transaction of a one-message BEGIN (onemsg.go), which database/sql
// does not know about, driven on its pinned connection.

// OneMessageTx is a PostgreSQL transaction begun on a pinned connection by a
// message of the protocol's own (BEGIN and the lock together), which
// database/sql does not know about. Statements run on the connection;
// Commit and Rollback send COMMIT or ROLLBACK, bounded by the transaction's
// own context, then give the connection back to the pool only when the
// server reports it idle outside any transaction, and destroy it otherwise.
// After Commit or Rollback, Exec, Query and Prepare return sql.ErrTxDone and
// QueryRow's row fails with sql.ErrConnDone, as on a *sql.Tx that ended.
//
// It is what GORM sees as the transaction's ConnPool (a gorm.TxCommitter,
// so GORM and dbresolver treat it as a transaction: nested calls use
// savepoints) and what ent's dialect.Tx runs statements on.
type OneMessageTx struct {
	pin    pinned    // the connection, of either kind (pin.go)
	conn   *sql.Conn // pin's *sql.Conn; nil on a pgx pool's connection (see ExecContext)
	db     *sql.DB
	ctx    context.Context // the transaction's own context: bounds COMMIT and ROLLBACK
	cancel context.CancelFunc

	// snapDefault is the server's transaction_isolation when BEGIN named
	// no level and that level takes its snapshot once (snapshotLevel);
	// LevelDefault otherwise.
	snapDefault sql.IsolationLevel

	mu   sync.Mutex
	done bool
}

func (t *OneMessageTx) markDone() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	was := t.done
	t.done = true
	return was
}

func (t *OneMessageTx) ended() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.done
}

// usable is what a *sql.Tx checks before a statement: the transaction
// has not ended and ctx has not. A statement on an ended context must not
// reach pgx, which answers it with driver.ErrBadConn (nothing was sent),
// upon which database/sql closes the connection under the open transaction:
// its lock would then be freed only when the server notices.
func (t *OneMessageTx) usable(ctx context.Context) error {
	if t.ended() {
		return sql.ErrTxDone
	}
	return ctx.Err()
}

// ExecContext runs a statement in the transaction. On a pgx pool's
// connection (Op.Pgx) it runs through pgx: the protocol's own statements
// on a Session's lock transaction (the keepalive, the owner); fn works on
// the pgx connection itself (LockedTx.PgxConn).
func (t *OneMessageTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if err := t.usable(ctx); err != nil {
		return nil, err
	}
	if t.conn == nil {
		tag, err := pgxConnOfPin(t.pin).Exec(ctx, query, args...)
		if err != nil {
			return nil, err
		}
		return pgxResult(tag.RowsAffected()), nil
	}
	return t.conn.ExecContext(ctx, query, args...)
}

// pgxResult is the sql.Result of a statement run through pgx.
type pgxResult int64

func (pgxResult) LastInsertId() (int64, error) {
	return 0, errors.New("ormlock: LastInsertId is not supported by PostgreSQL")
}
func (r pgxResult) RowsAffected() (int64, error) { return int64(r), nil }

// errPgxConn refuses database/sql's rows on a pgx pool's connection.
var errPgxConn = errors.New("ormlock: the transaction's connection is a pgx pool's: query it through pgx")

// QueryContext runs a query in the transaction (a *sql.DB's connection
// only: see errPgxConn).
func (t *OneMessageTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if err := t.usable(ctx); err != nil {
		return nil, err
	}
	if t.conn == nil {
		return nil, errPgxConn
	}
	return t.conn.QueryContext(ctx, query, args...)
}

// QueryRowContext runs a query that returns at most one row in the
// transaction (a *sql.DB's connection only: on a pgx pool's the row fails
// as on an ended context).
func (t *OneMessageTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if ctx.Err() != nil || t.conn == nil {
		// the pool checks ctx before it takes a connection: a row that
		// carries ctx's error, without touching any connection
		if ctx.Err() == nil {
			c, cancel := context.WithCancel(ctx)
			cancel()
			ctx = c
		}
		db := t.db
		if db == nil { // pgxlock's call may have opened none
			db = noDB()
		}
		return db.QueryRowContext(ctx, query, args...)
	}
	return t.conn.QueryRowContext(ctx, query, args...)
}

// noDB is a *sql.DB that never connects, for the row of a query that an
// ended context refuses (QueryRowContext) when the transaction has no
// *sql.DB: opened the first time it is needed, never in practice.
var noDB = sync.OnceValue(func() *sql.DB { return sql.OpenDB(noConnector{}) })

type noConnector struct{}

func (noConnector) Connect(context.Context) (driver.Conn, error) { return nil, errPgxConn }
func (noConnector) Driver() driver.Driver                        { return noDriver{} }

type noDriver struct{}

func (noDriver) Open(string) (driver.Conn, error) { return nil, errPgxConn }

// PrepareContext prepares a statement on the transaction's connection; it
// is valid until the transaction ends (a *sql.DB's connection only).
func (t *OneMessageTx) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	if err := t.usable(ctx); err != nil {
		return nil, err
	}
	if t.conn == nil {
		return nil, errPgxConn
	}
	return t.conn.PrepareContext(ctx, query)
}

// GetDBConn returns the pool the connection came from (GORM's DB()).
func (t *OneMessageTx) GetDBConn() (*sql.DB, error) { return t.db, nil }

// Commit sends COMMIT. A transaction the server had aborted answers COMMIT
// with ROLLBACK: that is pgx's ErrTxCommitRollback, as from a *sql.Tx.
func (t *OneMessageTx) Commit() error { return t.end("COMMIT") }

// Rollback sends ROLLBACK.
func (t *OneMessageTx) Rollback() error { return t.end("ROLLBACK") }

func (t *OneMessageTx) end(stmt string) error {
	if t.markDone() {
		return sql.ErrTxDone
	}
	idle := false
	err := t.pin.withPg(func(pc *pgconn.PgConn) error {
		mrr := pc.Exec(t.ctx, stmt)
		results, rolledBack := 0, false
		for mrr.NextResult() {
			tag, _ := mrr.ResultReader().Close()
			results++
			rolledBack = tag.String() == "ROLLBACK"
		}
		err := mrr.Close()
		idle = err == nil && pc.TxStatus() == 'I'
		if err != nil {
			return err
		}
		if stmt == "COMMIT" && results == 1 && rolledBack {
			return pgx.ErrTxCommitRollback
		}
		return nil
	})
	if idle {
		t.pin.giveBack()
	} else {
		t.pin.destroy()
	}
	t.cancel()
	return err
}
