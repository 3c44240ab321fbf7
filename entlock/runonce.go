package entlock

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"entgo.io/ent/dialect"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/verbs"
)

// RunOnce runs fn at most once per (job, slot) across every instance that
// shares the database, and records the run in the ledger table ([Migrate]):
// gormlock.RunOnce for ent, on the same lock and rows. slot is the scheduled
// time, never time.Now(): take it from an [ormlock.Schedule], or call
// [RunScheduled] (a slot with a fraction of a second is refused); fn reads
// it with [Slot](tx). A slot already done returns [ormlock.ErrAlreadyDone];
// [ormlock.WithClaim] selects claim mode, where fn's tx is a transaction of
// its own. client (or the *Driver) must be built on [Wrap]; a transactional
// client is refused. A job name is valid UTF-8 without NUL bytes or a trailing space, at most
// 191 characters; bad input wraps [ormlock.ErrInvalidArgument].
// See docs/PROTOCOL.md (The verbs on each server, RunOnce).
func RunOnce[T TxLike](ctx context.Context, client interface {
	Tx(context.Context) (T, error)
}, job string, slot time.Time, fn func(tx T) error, opts ...ormlock.Option) error {
	return verbs.RunOnceOf[T](ctx, &call[T]{x: client, fn: fn}, pkg, job, slot, fn == nil, opts)
}

// workTx answers a claim-mode request (r.work): fn's own transaction, an
// ordinary one of the wrapped driver, begun on ctx (the lock's session
// context) at its first statement.
func (d *Driver) workTx(ctx context.Context, r *request, opts *sql.TxOptions) *workTx {
	if opts == nil && r.op != nil {
		opts = r.op.Cfg.TxOptions
	}
	return &workTx{ctx: ctx, begin: func(ctx context.Context) (dialect.Tx, error) {
		if opts == nil {
			return d.drv.Tx(ctx)
		}
		b, ok := d.drv.(interface {
			BeginTx(context.Context, *sql.TxOptions) (dialect.Tx, error)
		})
		if !ok {
			return nil, fmt.Errorf("ormlock: entlock: driver %T does not support BeginTx, needed for WithTxOptions", d.drv)
		}
		return b.BeginTx(ctx, opts)
	}}
}

// workTx is fn's transaction in RunOnce's claim mode. It begins the
// transaction of the wrapped driver at the first statement, so a job that
// never uses it holds no connection idle in a transaction; Commit and
// Rollback of a transaction never begun do nothing.
type workTx struct {
	ctx   context.Context
	begin func(context.Context) (dialect.Tx, error)

	mu    sync.Mutex
	tx    dialect.Tx
	ended bool
}

var _ dialect.Tx = (*workTx)(nil)

// get returns the transaction, beginning it on first use.
func (w *workTx) get() (dialect.Tx, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return nil, sql.ErrTxDone
	}
	if w.tx == nil {
		tx, err := w.begin(w.ctx)
		if err != nil {
			return nil, errs.Wrap(err, "entlock.RunOnce: begin fn's transaction")
		}
		w.tx = tx
	}
	return w.tx, nil
}

// end marks w ended and returns the transaction, nil if it never began.
func (w *workTx) end() (dialect.Tx, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return nil, sql.ErrTxDone
	}
	w.ended = true
	return w.tx, nil
}

// Exec runs the statement in the transaction.
func (w *workTx) Exec(ctx context.Context, query string, args, v any) error {
	tx, err := w.get()
	if err != nil {
		return err
	}
	return tx.Exec(ctx, query, args, v)
}

// Query runs the query in the transaction.
func (w *workTx) Query(ctx context.Context, query string, args, v any) error {
	tx, err := w.get()
	if err != nil {
		return err
	}
	return tx.Query(ctx, query, args, v)
}

// ExecContext runs the statement in the transaction (used by clients
// generated with the sql/execquery feature).
func (w *workTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	tx, err := w.get()
	if err != nil {
		return nil, err
	}
	ex, ok := tx.(interface {
		ExecContext(context.Context, string, ...any) (sql.Result, error)
	})
	if !ok {
		return nil, fmt.Errorf("ormlock: entlock: transaction %T does not support ExecContext", tx)
	}
	return ex.ExecContext(ctx, query, args...)
}

// QueryContext runs the query in the transaction (used by clients generated
// with the sql/execquery feature).
func (w *workTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	tx, err := w.get()
	if err != nil {
		return nil, err
	}
	q, ok := tx.(interface {
		QueryContext(context.Context, string, ...any) (*sql.Rows, error)
	})
	if !ok {
		return nil, fmt.Errorf("ormlock: entlock: transaction %T does not support QueryContext", tx)
	}
	return q.QueryContext(ctx, query, args...)
}

// Commit commits the transaction, if it began.
func (w *workTx) Commit() error {
	tx, err := w.end()
	if err != nil || tx == nil {
		return err
	}
	return tx.Commit()
}

// Rollback rolls the transaction back, if it began.
func (w *workTx) Rollback() error {
	tx, err := w.end()
	if err != nil || tx == nil {
		return err
	}
	return tx.Rollback()
}
