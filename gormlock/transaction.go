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
	return verbs.TransactionOf[*gorm.DB](ctxOf(db), driver{binder{db}, fn}, pkg, keys.Of[ormlock.Key](key), fn == nil, opts)
}

// driver is gormlock's verbs.Driver for one call of Transaction or
// RunOnce with fn: in the lock's transaction fn gets a session of db over
// it (or, nested in db's own transaction, a savepoint of that one:
// Nested); in claim mode db bound to the lock session's context, outside
// any transaction.
type driver struct {
	binder
	fn func(tx *gorm.DB) error
}

// Locked hands fn a session of db over lt (see session).
func (d driver) Locked(ctx context.Context, _ *lockproto.Op, lt *lockproto.LockedTx) (*gorm.DB, lockproto.Ender, error) {
	return d.session(ctx, lt.Tx), lt, nil
}

// Claimed hands fn db bound to ctx, outside any transaction: nothing to
// end.
func (d driver) Claimed(ctx context.Context, _ verbs.Pool, _ *lockproto.Op) (*gorm.DB, lockproto.Ender, error) {
	return d.db.WithContext(ctx), nil, nil
}

// Call calls fn on tx, so that fn's statements observe ctx's
// cancellation. In a transaction, a context that ended while fn ran rolls
// it back (fn's error, or else the context's, is returned), as GORM's own
// context-bound transactions do, only not before fn returns.
func (d driver) Call(ctx context.Context, tx *gorm.DB) error {
	if err := d.fn(tx); err != nil || !inTx(tx) {
		return err
	}
	return ctx.Err()
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

// session returns a session of d.db over the transaction tx, as GORM's
// own Begin builds one: same statement settings, ctx, and the
// prepared-statement wrapper when db uses PrepareStmt (the lock statements
// themselves ran on tx directly, never prepared).
func (d driver) session(ctx context.Context, tx lockproto.Tx) *gorm.DB {
	s := d.db.Session(&gorm.Session{Context: ctx})
	var pool gorm.ConnPool = tx
	if p, ok := s.Statement.ConnPool.(*gorm.PreparedStmtDB); ok {
		if stx, ok := tx.(*sql.Tx); ok {
			pool = &gorm.PreparedStmtTX{Tx: stx, PreparedStmtDB: p}
		}
	}
	s.Statement.ConnPool = pool
	return s
}

// prepared reports whether db uses GORM's PrepareStmt: its statements are
// cached per *sql.Tx, which BeginLocked then gives (BEGIN, then the lock;
// otherwise with pgx BEGIN and the lock are one message).
func prepared(db *gorm.DB) bool {
	if db.Statement == nil {
		return false
	}
	_, ok := db.Statement.ConnPool.(*gorm.PreparedStmtDB)
	return ok
}

// Nest refuses a nested call on MySQL/MariaDB (ErrNestedTransaction);
// on PostgreSQL the lock and fn go in a savepoint of db's transaction, as
// GORM's nested Transaction would make one (except that it is rolled back
// to even when the context has ended), and with GORM's
// DisableNestedTransaction in the transaction itself.
func (d driver) Nest(op *lockproto.Op) (bool, error) {
	// a savepoint holds only a lock the transaction holds (PostgreSQL's
	// xact-level advisory lock); a named lock is its connection's
	if !op.Target().Mechanism().XactLevel() {
		return false, fmt.Errorf("%w: %w: gormlock.%s on %q", ErrNestedTransaction, ormlock.ErrUnsupportedDialect, op.Verb, op.Key.String())
	}
	return !d.db.DisableNestedTransaction, nil
}

// InCallerTx hands fn a session of db, in db's transaction, bound to ctx.
func (d driver) InCallerTx(ctx context.Context) *gorm.DB {
	return d.db.Session(&gorm.Session{Context: ctx})
}
