package lockproto

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
	"weak"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/keys"
)

// Op is one use of a lock by a verb: the resolved key, the settings, and the
// timings its observer events report. An Op is used by one goroutine at a
// time, apart from the Session keepalive, which only reads it.
type Op struct {
	Dialect Dialect
	Key     keys.Key
	Cfg     config.Config
	Verb    string
	// hold is what the verb declared of its use of the lock (NewOpHeld).
	hold Holding
	// NeedSQLTx makes BeginLocked give a *sql.Tx on PostgreSQL, never a
	// *OneMessageTx (BEGIN and the lock in one message): GORM's PrepareStmt
	// caches statements per *sql.Tx.
	NeedSQLTx bool
	// SplitTx, when set, begins fn's transaction of the split protocol
	// in place of db.BeginTx (see split.go).
	SplitTx func(ctx context.Context, db *sql.DB, opts *sql.TxOptions) (Tx, error)
	// LockConns, when set (pgxlock: its pgx pool, through pgxdriver), is
	// a PostgreSQL pool that BeginLocked and Session, given no *sql.DB, pin
	// their lock connection from, driven by its driver with no
	// database/sql layer, wherever the lock travels in one message (see
	// poolNative, pgdriver.go); a *sql.DB (LazyDB) still serves the server
	// check, the fencing counter and the other paths.
	LockConns LockConnPool
	// LazyDB, when set, opens the *sql.DB that BeginLocked and Session
	// were given as nil, on first use (see sqlDB): with LockConns, most
	// calls never need one.
	LazyDB LazyDB
	// Job is the RunOnce job the lock is for ("" for other verbs); events
	// carry it, so that an observer can label them by job rather than by
	// key, which differs per slot.
	Job string
	// Resign, when set, is where a Lead's terms poll for a resign
	// (leadresign.go); nil: none is looked for.
	Resign ResignReader

	// then, when set (SetThen), is a statement that travels after the
	// lock statement in the message that begins fn's transaction on
	// PostgreSQL (RunOnce's ledger claim: pgthen.go), and what became of it
	then *thenStmt

	target Target // what o takes, resolved for its dialect (target.go)
	// held are the items of a shape o holds, in the order taken
	// (shapes.go); reserved is what it reserved in this process on a
	// shared lock connection (sharedconn.go)
	held     heldItems
	reserved []localLock

	fence fencing           // the counter, the token and the lock's backend (fence.go)
	my    mysqlLockConnVars // MySQL: the lock connection's session, read by GET_LOCK
	// ownerRows: o wrote the owner rows of what it holds (MySQL, owner.go),
	// which its release deletes
	ownerRows bool
	mysqlTx   *LockedTx // MySQL: the transaction BeginLocked gave, whose pinned connection MySQLImplicitCommit reads

	// cancel asks the server to cancel the lock statement on the pinned
	// connection it is about to run on (stmtCtx), when the caller knows how
	cancel serverCancel

	start    time.Time
	acquired time.Time

	use use // what the use's events carry, and its end (event.go)

	// checkedPool is the pool whose server check this Op consulted: a
	// lost lock or a failed release forgets its verdict (detect.go).
	checkedMu   sync.Mutex
	checkedPool weak.Pointer[sql.DB]
}

// Holding is what a verb declares about its use of a lock, which the
// protocol asks in place of the verb's name (verb names the call in errors
// and events only). The zero value is a lock held for one transaction,
// recording no owner row, of any shape.
type Holding struct {
	// Session: the lock is held on its lock connection while fn runs
	// outside the lock's transaction (Session, Lead's terms, RunOnce's
	// claim mode), not for one transaction: on MySQL/MariaDB a keepalive
	// checks it (IS_USED_LOCK), which an engine must answer.
	Session bool
	// Owner: the lock's owner row is written whenever config.Owner names
	// one (Lead's terms); otherwise only with config.OwnerRow.
	Owner bool
	// OneKey: the lock is one exclusive key; a lock shape is refused
	// (Lead).
	OneKey bool
	// OneHolder: the lock is looked up for its one holder (Holder); a set
	// or a semaphore, which have several, is refused.
	OneHolder bool
	// Rate: a rate limit (keys.Rate) is accepted, its token taken in the
	// transaction the verb begins for fn (Transaction); every other use
	// refuses one.
	Rate bool
}

// The holdings of the verbs.
var (
	// HeldForTx is a lock held for one transaction: Transaction, RunOnce's
	// default mode, Lock, Migrate.
	HeldForTx = Holding{}
	// HeldForSession is a lock held on its connection while fn runs:
	// Session, RunOnce's claim mode.
	HeldForSession = Holding{Session: true}
	// HeldForLead is a term of Lead: a session's lock of one exclusive
	// key, which names its owner.
	HeldForLead = Holding{Session: true, Owner: true, OneKey: true}
	// HeldForHolder is Holder's look-up of one holder.
	HeldForHolder = Holding{OneHolder: true}
	// HeldForTransaction is HeldForTx for Transaction, the one verb a rate
	// limit is the key of.
	HeldForTransaction = Holding{Rate: true}
)

// NewOp is NewOpHeld for a lock held for one transaction (HeldForTx).
func NewOp(d Dialect, verb string, k keys.Key, cfg config.Config) (*Op, error) {
	return NewOpHeld(d, verb, k, cfg, HeldForTx)
}

// NewOpHeld validates the key and settings, refuses a shape that h does
// not combine with, and resolves the key for d; verb names the call in
// errors and events.
func NewOpHeld(d Dialect, verb string, k keys.Key, cfg config.Config, h Holding) (*Op, error) {
	if err := cfg.Err(); err != nil {
		return nil, err
	}
	if err := k.Validate(); err != nil {
		return nil, err
	}
	if err := rateCombines(verb, h, k, cfg); err != nil {
		return nil, err
	}
	if err := shapeCombines(verb, h, k, cfg); err != nil {
		return nil, err
	}
	t, err := newTargetOf(d, k, cfg.Namespace, cfg.Lease > 0)
	if err != nil {
		return nil, err
	}
	return &Op{Dialect: d, Key: k, Cfg: cfg, Verb: verb, hold: h, target: t}, nil
}

// Target is what o takes, as its dialect resolved it.
func (o *Op) Target() Target { return o.target }

// attempt starts a lock call: its clock and EventAttempt; then it returns
// how long the call may wait for the lock (budget).
func attempt(ctx context.Context, o *Op) (wait time.Duration, bounded bool, err error) {
	o.start = time.Now()
	o.Emit(ctx, config.EventAttempt, nil)
	return o.budget(ctx)
}

// attempted makes sure that an outcome reported before the lock call (no
// connection, no transaction) follows an EventAttempt and has a clock, so an
// observer always sees attempt, then not_acquired, with a Wait measured from
// the attempt rather than from the zero time.
func attempted(ctx context.Context, o *Op) {
	if o.start.IsZero() {
		o.start = time.Now()
		o.Emit(ctx, config.EventAttempt, nil)
	}
}

// Abandon handles an error err that ended the verb before the lock was
// tried (its transaction could not begin, for one) as a failed acquisition:
// the observer gets an EventAttempt, then an EventNotAcquired carrying err,
// and when ctx has ended the returned error also matches
// errs.ErrNotAcquired and the context's error, as a wait cut short does;
// otherwise err is returned unchanged. It does nothing and returns err when
// err is nil or the lock was tried, whose outcome was reported already.
func (o *Op) Abandon(ctx context.Context, err error) error {
	if err == nil || !o.start.IsZero() {
		return err
	}
	return failed(ctx, o, err)
}

// notAcquired builds the ErrNotAcquired outcome. When cause is a context
// error, the result matches both ErrNotAcquired and cause.
func notAcquired(ctx context.Context, o *Op, cause error) error {
	attempted(ctx, o)
	o.Emit(ctx, config.EventNotAcquired, cause)
	if cause == nil {
		return fmt.Errorf("%w: %q is held by another holder", errs.ErrNotAcquired, o.Key.String())
	}
	return fmt.Errorf("%w: %q: %w", errs.ErrNotAcquired, o.Key.String(), cause)
}

// failed classifies an error raised while acquiring: when the context ended
// it is a not-acquired outcome that also matches the context error.
func failed(ctx context.Context, o *Op, err error) error {
	if cerr := ctxErr(ctx); cerr != nil {
		return notAcquired(ctx, o, errs.Join(cerr, err))
	}
	if statementTimeout(err) || lockDeadlock(err) {
		// the server's own statement timeout ended the lock wait: the
		// lock was not taken (the server error stays in the chain)
		return notAcquired(ctx, o, err)
	}
	attempted(ctx, o)
	o.Emit(ctx, config.EventNotAcquired, err)
	return err
}

// AcquireXact takes the PostgreSQL transaction-level lock on the open
// transaction q (try once, or wait per the settings). It returns nil when the
// lock is held, an error wrapping errs.ErrNotAcquired when another holder
// has it, or another error. After a failed wait the transaction is aborted and
// must be rolled back. The lock is released by the transaction's end; call
// EndXact then.
func (o *Op) AcquireXact(ctx context.Context, q Querier) error {
	return pgMech.acquireXact(ctx, o, q, nil)
}

// AcquireXactOn is AcquireXact on a transaction q begun on the pinned
// connection conn: a cancellation of ctx during the lock statement then
// asks the server to end it (see stmtCtx), rather than leaving a waiter in
// the server when the connection is closed.
func (o *Op) AcquireXactOn(ctx context.Context, conn *sql.Conn, q Querier) error {
	o.cancel = pgCancelOf(conn)
	defer func() { o.cancel = nil }()
	return pgMech.acquireXact(ctx, o, q, nil)
}

// errSnapshotTaken says that the lock's first statement ran in a
// transaction whose isolation (the server's default: none was asked for)
// takes its snapshot once, so that statement took it before the lock: the
// transaction must be given up for the two-connection path.
var errSnapshotTaken = errors.New("the transaction's snapshot was taken before the lock")

// acquireXact is AcquireXact; with iso, the lock's first statement reads
// the transaction's isolation into it, and a snapshot-once level returns
// errSnapshotTaken (no event: the caller starts over), the lock, if taken,
// released with the transaction the caller rolls back.
func (pgAdvisory) acquireXact(ctx context.Context, o *Op, q Querier, iso *string) error {
	if !o.target.Simple() {
		return pgMech.acquireShape(ctx, o, q, iso)
	}
	wait, bounded, err := attempt(ctx, o)
	if err != nil {
		return err
	}
	var ok bool
	var pid *uint32
	if o.Cfg.Fencing {
		pid = &o.fence.pid // the token's issuance checks this backend holds the lock
	}
	sctx, done := stmtCtx(ctx, wait > 0, o.cancel)
	if wait > 0 {
		ok, err = PGWaitXact(sctx, q, o.target.pg, wait, iso, pid)
	} else {
		ok, err = PGTryXact(sctx, q, o.target.pg, iso, pid)
	}
	done()
	if errors.Is(err, errSnapshotTaken) {
		return err
	}
	if err == nil && ok && ctx.Err() != nil {
		// the lock came as the caller gave up: the caller's ROLLBACK
		// gives it back
		ok, err = false, ctx.Err()
	}
	return settle(ctx, o, ok, bounded, err)
}

func settle(ctx context.Context, o *Op, ok, bounded bool, err error) error {
	if err != nil {
		return failed(ctx, o, err)
	}
	if !ok {
		if bounded {
			return notAcquired(ctx, o, context.DeadlineExceeded)
		}
		return notAcquired(ctx, o, nil)
	}
	o.acquired = time.Now()
	o.Emit(ctx, config.EventAcquired, nil)
	return nil
}

// Acquired reports whether the lock was taken by this Op.
func (o *Op) Acquired() bool { return !o.acquired.IsZero() }

// EndXact reports the end of the transaction that held a PostgreSQL xact
// lock: the lock was released with it.
func (o *Op) EndXact(ctx context.Context) {
	if o.Acquired() {
		o.Emit(ctx, config.EventReleased, nil)
	}
}

// acquire runs GET_LOCK on the pinned connection q.
func (mysqlNamed) acquire(ctx context.Context, o *Op, q Querier) error {
	if !o.target.Simple() {
		return mysqlMech.acquireShape(ctx, o, q)
	}
	wait, bounded, err := attempt(ctx, o)
	if err != nil {
		return err
	}
	var ok bool
	o.my = mysqlLockConnVars{autocommit: 1}
	if wait > 0 {
		wctx, done := stmtCtx(ctx, true, o.cancel)
		ok, err = mysqlGetLock(wctx, q, o.target.mysql, wait, &o.my)
		done()
	} else {
		// GET_LOCK(name, 0) answers at once: it is let finish (GraceCtx),
		// since a statement cut under way closes the connection while the
		// server may still grant it the lock, held after the call returned
		// until the server notices; a lock that came as ctx ended is given
		// back below
		tctx, done := GraceCtx(ctx)
		ok, err = mysqlGetLock(tctx, q, o.target.mysql, 0, &o.my)
		done()
	}
	if err == nil && ok && ctx.Err() != nil {
		// the lock came as the caller gave up: released here, the
		// release confirmed (else the caller destroys the connection)
		rctx, cancel := releaseCtx(ctx)
		rerr := withinGrace(ctx, cancel, func() error { return MySQLReleaseLock(rctx, q, o.target.mysql) })
		cancel()
		ok, err = false, errs.Join(ctx.Err(), rerr)
	}
	return settle(ctx, o, ok, bounded, err)
}

// canceller returns the KILL QUERY of the lock statement about to run
// on conn, a connection of db, for a wait that ctx can cut short (see
// stmtCtx): it costs a round trip (the connection's id) before the wait,
// and nothing otherwise; nil when there is nothing to cancel or the id
// could not be read.
func (mysqlNamed) canceller(ctx context.Context, o *Op, db *sql.DB, conn *sql.Conn) serverCancel {
	if o.Cfg.Wait <= 0 || ctx.Done() == nil || db == nil || ctx.Err() != nil {
		return nil
	}
	var id int64
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		return nil
	}
	return func(ctx context.Context) error {
		_, err := db.ExecContext(ctx, "KILL QUERY "+strconv.FormatInt(id, 10))
		return err
	}
}

// Token returns the fencing token of o's acquisition, once issued
// (fence.go issues it).
func (o *Op) Token() (int64, bool) { return o.fence.token, o.fence.token > 0 }

// tokenContext returns ctx carrying o's token, when one was issued.
func tokenContext(ctx context.Context, o *Op) context.Context {
	if tok, ok := o.Token(); ok {
		return config.WithToken(ctx, tok)
	}
	return ctx
}

// TokenContext is tokenContext for the adapters: ctx carrying o's token
// (ormlock.FencingToken reads it), or ctx itself without one.
func (o *Op) TokenContext(ctx context.Context) context.Context { return tokenContext(ctx, o) }
