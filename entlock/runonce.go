package entlock

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"entgo.io/ent/dialect"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/ledger"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/sched"
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
	const verb = "RunOnce"
	d, cfg, err := open(ctx, verb, client, opts, ledger.CheckRunOnce("entlock."+verb, fn == nil, job, slot))
	if err != nil {
		return err
	}
	op, err := lockproto.NewOp(d.dial, verb, keys.RunKey(job, slot), cfg)
	if err != nil {
		return err
	}
	r, err := ledger.NewRun("entlock."+verb, op, job, slot)
	if err != nil {
		return err
	}
	ctx = sched.WithSlot(ctx, r.Slot())
	if cfg.Claim {
		// the locked transaction's path (Driver.begin) checks these
		// itself; claim mode takes its lock without one
		if err := op.EndedLock(ctx); err != nil {
			return err
		}
		if err := op.CheckServer(ctx, d.db); err != nil {
			return err
		}
		return r.Claimed(ctx, d.db, func(lctx context.Context) error {
			tx, err := begin(lctx, client, &request{verb: verb, op: op, work: true})
			if err != nil {
				return err
			}
			defer recordToken(tx, op)()
			defer recordSlot(tx, r.Slot())()
			return run(ctx, verb, tx, fn)
		})
	}
	lr := &request{verb: verb, op: op}
	tx, err := begin(ctx, client, lr)
	if err != nil {
		return err
	}
	q := lr.tx.(*lockedTx).lt.Tx
	defer recordToken(tx, op)()
	defer recordSlot(tx, r.Slot())()
	return run(ctx, verb, tx, func(tx T) error {
		return r.InTx(ctx, q, func() error { return fn(tx) })
	})
}

// RunScheduled is [RunOnce] for the slot of the current time under
// schedule: RunOnce(ctx, client, job, schedule.Slot(time.Now()), fn,
// opts...), the form that cannot get the slot wrong (see
// gormlock.RunScheduled). With [ormlock.WithCatchUp] it first runs the
// missed slots of the window; fn reads the slot it runs with [Slot](tx). A
// nil schedule is an error wrapping [ormlock.ErrInvalidArgument]. See
// docs/SCHEDULES.md (Catch-up of missed slots).
func RunScheduled[T TxLike](ctx context.Context, client interface {
	Tx(context.Context) (T, error)
}, job string, schedule ormlock.Schedule, fn func(tx T) error, opts ...ormlock.Option) error {
	const verb = "RunScheduled"
	if err := checkCall(ctx, verb, client, opts); err != nil {
		return err
	}
	return ledger.Scheduled(ctx, "entlock."+verb, job, schedule, func() (ledger.Reader, error) { return readerOf(ctx, verb, client, opts, nil) },
		func(slot time.Time) error { return RunOnce(ctx, client, job, slot, fn, opts...) })
}

// Runs returns the last limit runs of job from the ledger table, newest slot
// first: who ran which slot, when, for how long, and with which error, in the
// namespace in effect ([ormlock.WithNamespace], per call or given to [Wrap]).
// x is the client or the *Driver, as for [Session]; a transactional client
// (tx.Client()) is refused. limit must be positive. See docs/PROTOCOL.md (The
// ledger).
func Runs[T TxLike](ctx context.Context, x interface {
	Tx(context.Context) (T, error)
}, job string, limit int, opts ...ormlock.Option) ([]ormlock.Run, error) {
	const verb = "Runs"
	d, cfg, err := open(ctx, verb, x, opts, ledger.CheckRuns("entlock."+verb, job, limit))
	if err != nil {
		return nil, err
	}
	t, err := ledger.NewTable(d.dial, cfg.LedgerTable)
	if err == nil {
		err = checkPool(ctx, d)
	}
	if err != nil {
		return nil, err
	}
	return ledger.RunsAs[ormlock.Run](t.Runs(ctx, d.db, cfg.Namespace, job, limit))
}

// readerOf returns what reading the ledger through x needs, the call
// checked as open does: the settings (Wrap's defaults with opts), the
// table, and the wrapped pool.
func readerOf[T TxLike](ctx context.Context, verb string, x interface {
	Tx(context.Context) (T, error)
}, opts []ormlock.Option, argErr error) (ledger.Reader, error) {
	d, cfg, err := open(ctx, verb, x, opts, argErr)
	if err != nil {
		return ledger.Reader{}, err
	}
	t, err := ledger.NewTable(d.dial, cfg.LedgerTable)
	if err != nil {
		return ledger.Reader{}, err
	}
	return ledger.Reader{Cfg: cfg, T: t, Q: d.db}, nil
}

// checkCall validates what every ledger and lookup verb is given: a context,
// a client (or Driver), and options that are valid on their own.
func checkCall(ctx context.Context, verb string, x any, opts []ormlock.Option) error {
	if ctx == nil {
		return fmt.Errorf("%w: entlock.%s: nil context", ormlock.ErrInvalidArgument, verb)
	}
	if isNil(x) {
		return fmt.Errorf("%w: entlock.%s: nil client", ormlock.ErrInvalidArgument, verb)
	}
	return config.New(opts...).Err()
}

// open validates a ledger or lookup verb's call (checkCall, then argErr:
// the result of the verb's own argument check, nil when it has none), then
// finds the Driver under x (see driverOf) and returns it with its defaults
// and opts applied, or why it cannot take locks.
func open[T TxLike](ctx context.Context, verb string, x interface {
	Tx(context.Context) (T, error)
}, opts []ormlock.Option, argErr error) (*Driver, config.Config, error) {
	if err := checkCall(ctx, verb, x, opts); err != nil {
		return nil, config.Config{}, err
	}
	if argErr != nil {
		return nil, config.Config{}, argErr
	}
	d, err := driverOf(ctx, verb, x)
	if err != nil {
		return nil, config.Config{}, err
	}
	if d.err != nil {
		return nil, config.Config{}, d.err
	}
	cfg := d.cfg.With(opts...)
	if err := cfg.Err(); err != nil {
		return nil, config.Config{}, err
	}
	return d, cfg, nil
}

// checkPool is the server check of the verbs that build no Op (Runs,
// Prune) on d's pool: a context that has ended returns its error first,
// sending nothing.
func checkPool(ctx context.Context, d *Driver) error {
	if err := lockproto.Ended(ctx); err != nil {
		return err
	}
	return lockproto.CheckPool(ctx, d.dial, d.db, d.db)
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
