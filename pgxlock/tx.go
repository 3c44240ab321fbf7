package pgxlock

import (
	"context"
	"database/sql"
	"errors"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/pgxdriver"
)

// lockedTx is what one locked transaction gives fn: its pgx connection and
// the ends of the transaction (the protocol's, which release the lock after
// COMMIT or ROLLBACK).
type lockedTx struct {
	conn   *pgx.Conn
	lt     *lockproto.LockedTx
	sp     int64 // savepoints begun so far
	ended  bool  // fn committed or rolled back the transaction itself
	endErr error // and that was the outcome
	lo     *pgx.LargeObjects
}

// tx is the pgx.Tx fn gets: the locked transaction itself (savepoint 0), or
// a savepoint in it begun by Begin, as pgx's own nested transactions are.
type tx struct {
	root      *lockedTx
	savepoint int64
	closed    bool
}

var _ pgx.Tx = (*tx)(nil)

// errEnded tells the verb that fn ended the transaction itself, with
// success.
var errEnded = errors.New("ormlock: pgxlock: fn ended the transaction")

func (t *tx) check() error {
	if t.closed || t.root.ended {
		return pgx.ErrTxClosed
	}
	return nil
}

// Begin starts a pseudo nested transaction: a savepoint.
func (t *tx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	t.root.sp++
	n := t.root.sp
	if _, err := t.root.conn.Exec(ctx, "SAVEPOINT sp_"+strconv.FormatInt(n, 10)); err != nil {
		return nil, err
	}
	return &tx{root: t.root, savepoint: n}, nil
}

// Commit releases a savepoint; on the transaction itself it commits it and
// releases the lock at once (which otherwise happens when fn returns).
func (t *tx) Commit(ctx context.Context) error {
	return t.end(ctx, "RELEASE SAVEPOINT sp_", t.root.lt.Commit)
}

// Rollback rolls back to a savepoint; on the transaction itself it rolls it
// back and releases the lock at once.
func (t *tx) Rollback(ctx context.Context) error {
	return t.end(ctx, "ROLLBACK TO SAVEPOINT sp_", t.root.lt.Rollback)
}

// end ends t: a savepoint with the statement savepoint (followed by its
// name), the transaction itself with root, which records the outcome.
func (t *tx) end(ctx context.Context, savepoint string, root func() error) error {
	if err := t.check(); err != nil {
		return err
	}
	t.closed = true
	if t.savepoint > 0 {
		_, err := t.root.conn.Exec(ctx, savepoint+strconv.FormatInt(t.savepoint, 10))
		return err
	}
	t.root.ended = true
	t.root.endErr = root()
	return t.root.endErr
}

// CopyFrom runs COPY FROM on the transaction's connection.
func (t *tx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.check(); err != nil {
		return 0, err
	}
	return t.root.conn.CopyFrom(ctx, table, columns, src)
}

// SendBatch sends a batch on the transaction's connection.
func (t *tx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := t.check(); err != nil {
		return errBatch{err}
	}
	return t.root.conn.SendBatch(ctx, b)
}

// LargeObjects returns pgx's large-object API on the transaction. pgx
// builds it only on a transaction of its own, so the first call begins one
// inside this transaction as a savepoint (one round trip, with no context:
// use it while fn runs).
func (t *tx) LargeObjects() pgx.LargeObjects {
	if t.root.lo == nil {
		inner, err := t.root.conn.BeginTx(context.Background(), pgx.TxOptions{BeginQuery: "SAVEPOINT ormlock_large_objects"})
		if err != nil {
			return pgx.LargeObjects{}
		}
		lo := inner.LargeObjects()
		t.root.lo = &lo
	}
	return *t.root.lo
}

// Prepare prepares a statement on the transaction's connection.
func (t *tx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	return t.root.conn.Prepare(ctx, name, sql)
}

// Exec runs a statement in the transaction.
func (t *tx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := t.check(); err != nil {
		return pgconn.CommandTag{}, err
	}
	return t.root.conn.Exec(ctx, sql, args...)
}

// Query runs a query in the transaction.
func (t *tx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	return t.root.conn.Query(ctx, sql, args...)
}

// QueryRow runs a query that returns at most one row in the transaction.
func (t *tx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.check(); err != nil {
		return errRow{err}
	}
	return t.root.conn.QueryRow(ctx, sql, args...)
}

// Conn returns the transaction's connection.
func (t *tx) Conn() *pgx.Conn { return t.root.conn }

// errRow is the row of a query on an ended transaction.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// errBatch is the result of a batch on an ended transaction.
type errBatch struct{ err error }

func (b errBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b errBatch) Query() (pgx.Rows, error)         { return nil, b.err }
func (b errBatch) QueryRow() pgx.Row                { return errRow(b) }
func (b errBatch) Close() error                     { return b.err }
func (b errBatch) Tx() pgx.Tx                       { return nil }

// splitTx begins fn's transaction of the split protocol (REPEATABLE READ,
// SERIALIZABLE) on a connection pinned here, whose pgx connection fn then
// works on; the connection goes back when the transaction ends.
func splitTx(ctx context.Context, db *sql.DB, opts *sql.TxOptions) (lockproto.Tx, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	pc, err := pgxdriver.ConnOf(conn)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	stx, err := conn.BeginTx(ctx, opts)
	if err != nil {
		lockproto.Destroy(conn)
		return nil, err
	}
	return &pinnedTx{Tx: stx, conn: conn, pgx: pc}, nil
}

// pinnedTx is a *sql.Tx on a connection pinned for it, given back when the
// transaction ends (destroyed when the end failed).
type pinnedTx struct {
	*sql.Tx
	conn *sql.Conn
	pgx  *pgx.Conn
}

func (p *pinnedTx) Commit() error   { return p.done(p.Tx.Commit()) }
func (p *pinnedTx) Rollback() error { return p.done(p.Tx.Rollback()) }

func (p *pinnedTx) done(err error) error {
	if err != nil && !errors.Is(err, sql.ErrTxDone) {
		lockproto.Destroy(p.conn)
		return err
	}
	_ = p.conn.Close()
	return err
}

// txOf builds the tx fn gets over lt.
func txOf(lt *lockproto.LockedTx) (*tx, error) {
	var pc *pgx.Conn
	if p, ok := lt.Tx.(*pinnedTx); ok {
		pc = p.pgx
	} else {
		var err error
		if pc, err = pgxdriver.TxConn(lt); err != nil {
			return nil, errs.Wrap(err, "pgxlock: the transaction's pgx connection")
		}
	}
	// one allocation for both: fn's tx and the state it shares with its
	// savepoints
	both := &struct {
		t tx
		r lockedTx
	}{r: lockedTx{conn: pc, lt: lt}}
	both.t.root = &both.r
	return &both.t, nil
}
