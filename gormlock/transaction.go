package gormlock

import (
	"context"
	"database/sql"
	"fmt"

	"gorm.io/gorm"
	"gorm.io/plugin/dbresolver"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/verbs"
)

// Transaction runs fn inside one GORM transaction while the lock named by key
// is held, and returns fn's error unchanged (a failed rollback after it is
// added, as ent's WithTx does); key is a name, an id or an [ormlock.Key]. It tries once ([ormlock.ErrNotAcquired] when the lock is
// held, fn not called) unless [ormlock.WithWait] is given; the context is
// GORM's (db.WithContext). Protocol per dialect, cancellation, nesting and
// dbresolver: docs/PROTOCOL.md.
func Transaction[K ormlock.KeyType](db *gorm.DB, key K, fn func(tx *gorm.DB) error, opts ...ormlock.Option) error {
	var c call // on the stack
	if err := c.init(db, "Transaction", keys.Of[ormlock.Key](key), opts, fn == nil); err != nil {
		return err
	}
	return c.use(func() error { return c.transaction(fn) })
}

// call is one Transaction or RunOnce call on a *gorm.DB: what the verb
// core found behind db, and the lock.
type call struct {
	db  *gorm.DB
	ctx context.Context
	p   verbs.Pool
	op  *lockproto.Op
}

// init runs the verb core's checks of a call (verbs.Prepare) and fills in
// c.
func (c *call) init(db *gorm.DB, verb string, key keys.Key, opts []ormlock.Option, nilFn bool) error {
	ctx := ctxOf(db)
	p, op, err := verbs.Prepare(ctx, binder{db}, pkg, verb, key, opts, verbs.Args{NilFn: nilFn}, true, lockproto.HeldForTx)
	if err != nil {
		return err
	}
	*c = call{db: db, ctx: ctx, p: p, op: op}
	return nil
}

// use runs body as the call's use of the lock (lockproto.Op.Use: the
// hook's Start before it, End after it on every path out): under Start's
// context, which fn's tx carries.
func (c *call) use(body func() error) error {
	return c.op.Use(c.ctx, func(ctx context.Context) error {
		if ctx != c.ctx {
			c.ctx, c.db = ctx, c.db.WithContext(ctx)
		}
		return body()
	})
}

// ctxOf returns db's context, or context.Background() (db may be nil).
func ctxOf(db *gorm.DB) context.Context {
	if db != nil && db.Statement != nil && db.Statement.Context != nil {
		return db.Statement.Context
	}
	return context.Background()
}

// inTx reports whether db is already inside a transaction.
func inTx(db *gorm.DB) bool {
	if db.Statement == nil {
		return false
	}
	_, ok := db.Statement.ConnPool.(gorm.TxCommitter)
	return ok
}

// primary returns db routed to a source (primary) connection pool: with
// gorm.io/plugin/dbresolver registered, the Write clause switches the
// statement's pool to a source; without it the clause does nothing.
func primary(db *gorm.DB) *gorm.DB {
	if inTx(db) || db.Config == nil {
		return db
	}
	if _, ok := db.Config.Plugins[dbresolverName]; !ok {
		return db // no resolver: the statement's pool is the only one
	}
	return db.Clauses(dbresolver.Write)
}

// dbresolverName is the name gorm.io/plugin/dbresolver registers under.
var dbresolverName = (&dbresolver.DBResolver{}).Name()

// sqlTx returns the *sql.Tx (or other raw transaction) under a GORM
// transaction, bypassing GORM's prepared-statement wrapper, so that lock
// statements are never prepared (PgBouncer in transaction mode cannot keep
// prepared statements).
func sqlTx(tx *gorm.DB) (lockproto.Querier, error) {
	pool := tx.Statement.ConnPool
	if p, ok := pool.(*gorm.PreparedStmtTX); ok {
		pool = p.Tx
	}
	q, ok := pool.(lockproto.Querier)
	if !ok {
		return nil, fmt.Errorf("ormlock: GORM transaction pool %T cannot run queries", pool)
	}
	return q, nil
}

// primarySQL returns the *sql.DB of db's source (primary) pool.
func primarySQL(db *gorm.DB) (*sql.DB, error) {
	sqlDB, err := primary(db).DB()
	if err != nil {
		return nil, errs.Wrap(err, "get *sql.DB from gorm")
	}
	return sqlDB, nil
}

func (c *call) transaction(fn func(tx *gorm.DB) error) error {
	if inTx(c.db) {
		if c.op.Dialect == lockproto.MySQL {
			return fmt.Errorf("%w: %w: gormlock.%s on %q", ErrNestedTransaction, ormlock.ErrUnsupportedDialect, c.op.Verb, c.op.Key.String())
		}
		return c.pgNested(fn)
	}
	// GORM's PrepareStmt caches statements per *sql.Tx: it gets one (BEGIN,
	// then the lock); otherwise with pgx BEGIN and the lock are one message
	c.op.NeedSQLTx = c.prepared()
	lt, err := c.op.BeginLocked(c.ctx, c.p.DB, c.op.Cfg.TxOptions)
	if err != nil {
		return err
	}
	return lockproto.RunTx(c.ctx, lt, "gormlock."+c.op.Verb, func() error { return c.run(fn, c.session(lt.Tx)) })
}

// session returns a session of c.db over the transaction tx, as GORM's own
// Begin builds one: same statement settings, the caller's context, and the
// prepared-statement wrapper when db uses PrepareStmt (the lock statements
// themselves ran on tx directly, never prepared).
func (c *call) session(tx lockproto.Tx) *gorm.DB {
	s := c.db.Session(&gorm.Session{Context: c.op.TokenContext(c.ctx)})
	var pool gorm.ConnPool = tx
	if p, ok := s.Statement.ConnPool.(*gorm.PreparedStmtDB); ok {
		if stx, ok := tx.(*sql.Tx); ok {
			pool = &gorm.PreparedStmtTX{Tx: stx, PreparedStmtDB: p}
		}
	}
	s.Statement.ConnPool = pool
	return s
}

// prepared reports whether c.db uses GORM's PrepareStmt.
func (c *call) prepared() bool {
	if c.db.Statement == nil {
		return false
	}
	_, ok := c.db.Statement.ConnPool.(*gorm.PreparedStmtDB)
	return ok
}

// pgNested takes the lock inside a savepoint of the transaction db is
// already in (a nested call), after the nested protocol's check
// (lockproto.Op.CheckNested, which sqllock's and pgxlock's Lock make too):
// above READ COMMITTED that transaction's snapshot predates the lock, so
// fn could not see what the lock's earlier holders committed: refused
// before the savepoint. The savepoint is the nested protocol's
// (lockproto.Op.InSavepoint), as GORM's nested Transaction would make one,
// except that it is rolled back to even when the context has ended; with
// GORM's DisableNestedTransaction there is none.
func (c *call) pgNested(fn func(tx *gorm.DB) error) error {
	q, err := sqlTx(c.db)
	if err != nil {
		return err
	}
	if err := c.op.CheckNested(c.ctx, q, "gormlock."+c.op.Verb); err != nil {
		return err
	}
	if sqlDB, err := primarySQL(c.db); err == nil {
		if err := c.op.CheckFence(sqlDB); err != nil {
			return err
		}
	}
	defer c.op.EndXact(c.ctx)
	body := func() error {
		if err := c.op.AcquireXact(c.ctx, q); err != nil {
			return err
		}
		if err := c.nestedToken(); err != nil {
			return err
		}
		return c.run(fn, c.db.Session(&gorm.Session{Context: c.op.TokenContext(c.ctx)}))
	}
	if c.db.DisableNestedTransaction {
		return body()
	}
	return c.op.InSavepoint(c.ctx, q, body)
}

// run calls fn with the caller's context on tx, so fn's statements observe
// cancellation. A context that ended while fn ran rolls the transaction back
// (fn's error, or else the context's, is returned), as GORM's own
// context-bound transactions do, only not before fn returns.
func (c *call) run(fn func(tx *gorm.DB) error, tx *gorm.DB) error {
	if err := fn(tx); err != nil {
		return err
	}
	return c.ctx.Err()
}
