package lockproto

import (
	"context"
	"database/sql"
	"fmt"
	"sync"

	"github.com/ormlock/ormlock"
)

// LockedTx is a transaction begun with the lock held, for adapters that hand
// an open transaction to their ORM instead of running a callback inside the
// ORM's own transaction helper (entlock gives it to ent as a dialect.Tx).
// Commit and Rollback end the transaction and then the lock, once, on every
// path: on PostgreSQL the transaction's end releases the xact lock; on
// MySQL/MariaDB RELEASE_LOCK runs after COMMIT or ROLLBACK on the same pinned
// connection, which is destroyed if the release fails or is not confirmed.
//
// The transaction carries ctx's values but not its cancellation, so that the
// lock is held until the caller ends the transaction (database/sql would roll
// back a ctx-bound transaction, dropping a PostgreSQL lock, while the
// caller's callback may still be running). Statements still observe the
// context they are given. Once ctx has ended, Commit rolls back instead and
// returns ctx's error, as database/sql does for a transaction bound to ctx.
// Either way the caller must call Commit or Rollback.
type LockedTx struct {
	// Tx is the transaction, for running statements; end it through
	// LockedTx's Commit or Rollback, never Tx's own.
	Tx *sql.Tx

	ctx  context.Context
	op   *Op
	conn *sql.Conn
	once sync.Once
}

// BeginLocked pins a connection from db, takes o's lock and begins a
// transaction with opts on that connection: on PostgreSQL the transaction
// first, then pg_try_advisory_xact_lock (or the bounded wait) inside it; on
// MySQL/MariaDB GET_LOCK first, then the transaction. ctx bounds the wait for
// a connection and for the lock. On failure nothing is held and the error
// wraps ormlock.ErrNotAcquired when another holder has the lock (and ctx's
// error when ctx ended the wait).
func (o *Op) BeginLocked(ctx context.Context, db *sql.DB, opts *sql.TxOptions) (*LockedTx, error) {
	var conn *sql.Conn
	var err error
	switch o.D {
	case Postgres:
		if conn, err = db.Conn(ctx); err != nil {
			return nil, o.failed(ctx, fmt.Errorf("ormlock: pin a connection: %w", err))
		}
	case MySQL:
		if conn, err = o.LockNamed(ctx, db); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("%w: dialect %d", ormlock.ErrUnsupportedDialect, o.D)
	}
	tx, err := conn.BeginTx(context.WithoutCancel(ctx), opts)
	if err != nil {
		err = fmt.Errorf("ormlock: begin transaction: %w", err)
		if o.D == MySQL {
			_ = o.ReleaseNamed(ctx, conn)
			return nil, err
		}
		_ = conn.Close()
		return nil, o.failed(ctx, err)
	}
	if o.D == Postgres {
		if err := o.AcquireXact(ctx, tx); err != nil {
			_ = tx.Rollback()
			_ = conn.Close()
			return nil, err
		}
	}
	return &LockedTx{Tx: tx, ctx: ctx, op: o, conn: conn}, nil
}

// Commit commits the transaction (or rolls it back and returns ctx's error
// when ctx has ended), then releases the lock.
func (t *LockedTx) Commit() error {
	var err error
	if cerr := t.ctx.Err(); cerr != nil {
		_ = t.Tx.Rollback()
		err = cerr
	} else {
		err = t.Tx.Commit()
	}
	t.end()
	return err
}

// Rollback rolls the transaction back, then releases the lock.
func (t *LockedTx) Rollback() error {
	err := t.Tx.Rollback()
	t.end()
	return err
}

// end releases the lock after the transaction, once.
func (t *LockedTx) end() {
	t.once.Do(func() {
		switch t.op.D {
		case Postgres:
			_ = t.conn.Close()
			t.op.EndXact(t.ctx)
		case MySQL:
			_ = t.op.ReleaseNamed(t.ctx, t.conn)
		}
	})
}
