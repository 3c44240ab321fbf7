package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/ormlock/ormlock/keyhash"
)

// Attempt makes one try-once attempt on the key it was bound to: take the
// lock, call the critical section while holding it, release. It reports
// whether the lock was taken; a lock held elsewhere is (false, nil).
type Attempt func(ctx context.Context) (bool, error)

// Instance is a contender opened on one target.
type Instance interface {
	// Bind returns the attempt on key, calling crit while the lock is held.
	// Everything that can be built once (closures, resolved names) is built
	// here, so that an attempt measures the contender, not the harness.
	Bind(key string, crit func()) Attempt
	// Hold takes key as another process would and keeps it until release is
	// called; the loser loads use it.
	Hold(ctx context.Context, key string) (release func() error, err error)
	// Pools returns the database/sql pools the instance uses (none for
	// Redis), for leak checks.
	Pools() []*sql.DB
	// Close releases the instance's pools.
	Close() error
}

// Contender is one way of taking a lock.
type Contender struct {
	// Name labels the contender in the report.
	Name string
	// Baseline marks the hand-written SQL contender, the denominator of the
	// ratios.
	Baseline bool
	// Reference marks a contender that takes no lock (plain GORM
	// transaction): it runs only the uncontended loads.
	Reference bool
	// On reports whether the contender runs on targets of dialect d.
	On func(d Dialect) bool
	// Open prepares the contender on t for up to conns concurrent attempts.
	Open func(ctx context.Context, t Target, conns int) (Instance, error)
}

// Contender names.
const (
	CGormTransaction = "gormlock.Transaction"
	CEntTransaction  = "entlock.Transaction"
	CGormSession     = "gormlock.Session"
	CHandwritten     = "database/sql (hand-written)"
	CLease           = "lease table (INSERT/DELETE)"
	CRedisLock       = "bsm/redislock"
	CGormNoLock      = "GORM tx, no lock (reference)"
	CEntNoLock       = "ent tx, no lock (reference)"
	CSQLTransaction  = "sqllock.Transaction"
	CPgxTransaction  = "pgxlock.Transaction"
	CPgxHandwritten  = "pgx (hand-written)"
	CSQLNoLock       = "database/sql tx, no lock (reference)"
	CPgxNoLock       = "pgx tx, no lock (reference)"
)

func onSQL(d Dialect) bool   { return d == Postgres || d == MySQL }
func onRedis(d Dialect) bool { return d == Redis }

// Contenders returns every contender, in report order.
func Contenders() []Contender {
	return []Contender{
		{Name: CHandwritten, Baseline: true, On: onSQL, Open: openHandwritten},
		{Name: CGormTransaction, On: onSQL, Open: openGormTransaction},
		{Name: CEntTransaction, On: onSQL, Open: openEntTransaction},
		{Name: CSQLTransaction, On: onSQL, Open: openSQLTransaction},
		{Name: CPgxTransaction, On: onPostgres, Open: openPgxTransaction},
		{Name: CPgxHandwritten, On: onPostgres, Open: openPgxHandwritten},
		{Name: CGormSession, On: onSQL, Open: openGormSession},
		{Name: CLease, On: onSQL, Open: openLease},
		{Name: CRedisLock, On: onRedis, Open: openRedisLock},
		{Name: CGormNoLock, Reference: true, On: onSQL, Open: openGormNoLock},
		{Name: CEntNoLock, Reference: true, On: onSQL, Open: openEntNoLock},
		{Name: CSQLNoLock, Reference: true, On: onSQL, Open: openSQLNoLock},
		{Name: CPgxNoLock, Reference: true, On: onPostgres, Open: openPgxNoLock},
	}
}

// ---- shared pieces of the SQL contenders ----

// sibling returns the Open of a contender that runs on the pools of
// another one: base, opened with extra more connections, its instance
// wrapped by as.
func sibling[B, S Instance](base func(context.Context, Target, int) (Instance, error), extra int, as func(B) S) func(context.Context, Target, int) (Instance, error) {
	return func(ctx context.Context, t Target, conns int) (Instance, error) {
		i, err := base(ctx, t, conns+extra)
		if err != nil {
			return nil, err
		}
		return as(i.(B)), nil
	}
}

// sqlBase is a pool on a SQL target plus the hand-written holder that the
// advisory-lock contenders share.
type sqlBase struct {
	t  Target
	db *sql.DB
	// hold is a separate pool for Hold, so that a held key does not take a
	// connection from the contender's pool.
	hold *sql.DB
}

func openSQLBase(t Target, conns int) (*sqlBase, error) {
	db, err := t.openSQL(conns)
	if err != nil {
		return nil, err
	}
	hold, err := t.openSQL(2)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &sqlBase{t: t, db: db, hold: hold}, nil
}

func (b *sqlBase) Pools() []*sql.DB { return []*sql.DB{b.db, b.hold} }

func (b *sqlBase) Close() error { return errors.Join(b.db.Close(), b.hold.Close()) }

// Hold takes the advisory/named lock of key as existing hand-written code
// would. On PostgreSQL it is a transaction-level lock in a transaction kept
// open on a dedicated connection, which is also correct through PgBouncer in
// transaction mode.
func (b *sqlBase) Hold(ctx context.Context, key string) (func() error, error) {
	conn, err := b.hold.Conn(ctx)
	if err != nil {
		return nil, err
	}
	var ok bool
	if b.t.Dialect == Postgres {
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			conn.Close()
			return nil, err
		}
		if err := tx.QueryRowContext(ctx, "SELECT pg_try_advisory_xact_lock($1)", keyhash.Int64(key)).Scan(&ok); err != nil || !ok {
			_ = tx.Rollback()
			conn.Close()
			return nil, fmt.Errorf("bench: hold %q: ok=%v err=%v", key, ok, err)
		}
		return func() error {
			err := tx.Rollback()
			return errors.Join(err, conn.Close())
		}, nil
	}
	name := keyhash.MySQLName("", key)
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0) = 1", name).Scan(&ok); err != nil || !ok {
		conn.Close()
		return nil, fmt.Errorf("bench: hold %q: ok=%v err=%v", key, ok, err)
	}
	return func() error {
		var rel sql.NullInt64
		err := conn.QueryRowContext(context.Background(), "SELECT RELEASE_LOCK(?)", name).Scan(&rel)
		if err == nil && rel.Int64 != 1 {
			err = fmt.Errorf("bench: RELEASE_LOCK(%q) = %v", name, rel)
		}
		return errors.Join(err, conn.Close())
	}, nil
}

// gormOn wraps db in GORM with the settings a service would use, the logger
// silenced. skipDefaultTx skips GORM's implicit transaction around single
// writes.
func gormOn(t Target, db *sql.DB, skipDefaultTx bool) (*gorm.DB, error) {
	var dial gorm.Dialector
	if t.Dialect == Postgres {
		dial = postgres.New(postgres.Config{Conn: db})
	} else {
		dial = mysql.New(mysql.Config{Conn: db, SkipInitializeWithVersion: true})
	}
	gdb, err := gorm.Open(dial, &gorm.Config{Logger: logger.Discard, SkipDefaultTransaction: skipDefaultTx})
	if err != nil {
		return nil, fmt.Errorf("bench: gorm.Open on %s: %w", t.Name, err)
	}
	return gdb, nil
}
