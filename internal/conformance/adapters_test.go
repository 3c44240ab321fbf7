package conformance_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"reflect"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest"
	"github.com/ormlock/ormlock/pgxlock"
	"github.com/ormlock/ormlock/sqllock"
)

// The runner adapters of sqllock (database/sql) and pgxlock (a pgx pool);
// gormlock's and entlock's are in runner_test.go.

// ---- sqllock ----

// sqlLocker is sqllock on a *sql.DB; opts are the defaults it adds to every
// call (sqllock has no plugin to hold them).
type sqlLocker struct {
	db      *sql.DB
	dialect string
	opts    []ormlock.Option
}

// sqlTx is the *sql.Tx sqllock hands fn, with fn's ctx.
type sqlTx struct {
	ctx     context.Context
	tx      *sql.Tx
	dialect string
}

var _ runner = sqlLocker{}

func openSQL(t *testing.T, k testdb.Kind) locker {
	t.Helper()
	return sqlWith(t, k)
}

func sqlWith(t *testing.T, k testdb.Kind, opts ...ormlock.Option) runner {
	t.Helper()
	db := testdb.Open(t, k)
	enttest.Migrate(t, k)
	t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
	return sqlLocker{db, k.Dialect(), opts}
}

func sqlOnPool(t *testing.T, dialect string, db *sql.DB) runner {
	t.Helper()
	return sqlLocker{db: db, dialect: dialect}
}

func (s sqlLocker) with(opts []ormlock.Option) []ormlock.Option {
	if len(s.opts) == 0 {
		return opts
	}
	return append(append([]ormlock.Option(nil), s.opts...), opts...)
}

// sqlFn adapts fn to sqllock (nil stays nil, for the bad-input tests).
func (s sqlLocker) fn(fn func(txn) error) func(context.Context, *sql.Tx) error {
	if fn == nil {
		return nil
	}
	return func(ctx context.Context, tx *sql.Tx) error { return fn(sqlTx{ctx, tx, s.dialect}) }
}

func (s sqlLocker) Transaction(ctx context.Context, key any, fn func(txn) error, opts ...ormlock.Option) error {
	return sqllock.Transaction(ctx, s.db, keyOf(key), s.fn(fn), s.with(opts)...)
}

func (s sqlLocker) Session(ctx context.Context, key any, fn func(context.Context) error, opts ...ormlock.Option) error {
	return sqllock.Session(ctx, s.db, keyOf(key), fn, s.with(opts)...)
}

func (s sqlLocker) RunOnce(ctx context.Context, job string, slot time.Time, fn func(txn) error, opts ...ormlock.Option) error {
	return sqllock.RunOnce(ctx, s.db, job, slot, s.fn(fn), s.with(opts)...)
}

func (s sqlLocker) RunScheduled(ctx context.Context, job string, schedule ormlock.Schedule, fn func(txn) error, opts ...ormlock.Option) error {
	return sqllock.RunScheduled(ctx, s.db, job, schedule, s.fn(fn), s.with(opts)...)
}

func (s sqlLocker) Migrate(ctx context.Context, opts ...ormlock.Option) error {
	return sqllock.Migrate(ctx, s.db, s.with(opts)...)
}

func (s sqlLocker) Runs(ctx context.Context, job string, limit int, opts ...ormlock.Option) ([]ormlock.Run, error) {
	return sqllock.Runs(ctx, s.db, job, limit, s.with(opts)...)
}

func (s sqlLocker) Holder(ctx context.Context, key any, opts ...ormlock.Option) (ormlock.HolderInfo, error) {
	return sqllock.Holder(ctx, s.db, keyOf(key), s.with(opts)...)
}

func (s sqlLocker) Pool() *sql.DB { return s.db }

func (s sqlLocker) Prune(ctx context.Context, olderThan time.Duration, opts ...ormlock.Option) (int64, error) {
	return sqllock.Prune(ctx, s.db, olderThan, s.with(opts)...)
}

func (s sqlLocker) AdvanceFences(ctx context.Context, by int64, opts ...ormlock.Option) (int64, error) {
	return sqllock.AdvanceFences(ctx, s.db, by, s.with(opts)...)
}

func (s sqlLocker) PlainTx(ctx context.Context) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	return tx.Commit()
}

func (s sqlTx) Insert(owner string, n int) error {
	_, err := s.tx.ExecContext(s.ctx, insertItem(s.dialect), owner, n)
	return err
}

// insertItem is the statement that writes an item row, with the
// placeholders of dialect.
func insertItem(dialect string) string {
	if dialect == "postgres" {
		return "INSERT INTO items (owner, n) VALUES ($1, $2)"
	}
	return "INSERT INTO items (owner, n) VALUES (?, ?)"
}

func (s sqlTx) Exec(query string, args ...any) error {
	_, err := s.tx.ExecContext(s.ctx, query, args...)
	return err
}

func (s sqlTx) Scan(query string, dest ...any) error {
	return s.tx.QueryRowContext(s.ctx, query).Scan(dest...)
}

func (s sqlTx) Context() context.Context { return s.ctx }

func (s sqlTx) FencingToken() (int64, bool) { return ormlock.FencingToken(s.ctx) }

// sqllock on a pool of sqllock.Open (sqllock.Wrap's connector): the same
// verbs, with database/sql's BEGIN carrying the lock on PostgreSQL.

func openSQLWrapped(t *testing.T, k testdb.Kind) locker {
	t.Helper()
	return sqlWrappedWith(t, k)
}

func sqlWrappedWith(t *testing.T, k testdb.Kind, opts ...ormlock.Option) runner {
	t.Helper()
	db, err := sqllock.Open(k.Driver(), testdb.DSN(t, k))
	if err != nil {
		t.Fatalf("sqllock.Open: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	enttest.Migrate(t, k)
	t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
	return sqlLocker{db, k.Dialect(), opts}
}

// sqlWrappedOnPool opens a wrapped pool on db's own connector (read from
// database/sql's unexported field: a test's shortcut, so that nothing
// connects before the test does), with db's pool size.
func sqlWrappedOnPool(t *testing.T, dialect string, db *sql.DB) runner {
	t.Helper()
	f := reflect.ValueOf(db).Elem().FieldByName("connector")
	c, ok := reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Interface().(driver.Connector)
	if !ok {
		t.Fatal("database/sql's DB has no connector field")
	}
	w := sqllock.OpenDB(c)
	t.Cleanup(func() { _ = w.Close() })
	w.SetMaxOpenConns(db.Stats().MaxOpenConnections)
	return sqlLocker{db: w, dialect: dialect}
}

// sqlBeginRoundTrips sets sqllock's round trips in want: fn gets a *sql.Tx,
// which database/sql begins with a BEGIN of its own, so the lock is a
// statement of its own, as in the hand-written protocol (3 round trips);
// the wait sets lock_timeout first (4, as a hand-written wait does). On a
// pool of sqllock.Open ("sqllock-wrapped") that BEGIN carries the lock:
// the plain transaction's 2, as every other adapter.
func sqlBeginRoundTrips(a adapter, want map[string]int) {
	if a.name != "sqllock" {
		return
	}
	want["Transaction"] = 3
	want["Transaction, loser"] = 3
	want["Transaction (wait)"] = 4
	want["Transaction (wait), loser"] = 4
}

// ---- pgxlock ----

// pgxLocker is pgxlock on a *pgxpool.Pool; opts are the defaults it adds
// to every call.
type pgxLocker struct {
	pools *pgxPools
	opts  []ormlock.Option
}

// pgxPools gives a pgxLocker its pool, and the suite a database/sql view of
// it (Pool) that the suite's tests size as they size the other adapters'
// pools: the view's SetMaxOpenConns(n) makes the locker's pool one of n
// connections (the view's connections are that pool's).
type pgxPools struct {
	t   *testing.T
	dsn string
	db  *sql.DB // the view

	mu    sync.Mutex
	pools map[int32]*pgxpool.Pool // by MaxConns

	tracer pgx.QueryTracer // of the pools' connections, when set
}

// pgxTx is the pgx.Tx pgxlock hands fn, with fn's ctx.
type pgxTx struct {
	ctx context.Context
	tx  pgx.Tx
}

var _ runner = pgxLocker{}

func openPgx(t *testing.T, k testdb.Kind) locker {
	t.Helper()
	return pgxWith(t, k)
}

// pgxWith opens pgxlock on a new pool; pgxlock is PostgreSQL only, so the
// MariaDB cases of the suite are skipped for it.
func pgxWith(t *testing.T, k testdb.Kind, opts ...ormlock.Option) runner {
	t.Helper()
	if k.Dialect() != "postgres" {
		t.Skip("pgxlock is PostgreSQL only")
	}
	enttest.Migrate(t, k)
	ps := newPgxPools(t, testdb.DSN(t, k))
	t.Cleanup(func() { testdb.AssertNoLeaks(t, k, ps.db) })
	return pgxLocker{ps, opts}
}

// newPgxPools opens the view of a pgxPools on dsn; its pools open on first
// use and close when the test ends, after a check that none of their
// connections is still acquired.
func newPgxPools(t *testing.T, dsn string) *pgxPools {
	t.Helper()
	ps := &pgxPools{t: t, dsn: dsn, pools: map[int32]*pgxpool.Pool{}}
	ps.db = sql.OpenDB(pgxView{ps})
	t.Cleanup(func() {
		_ = ps.db.Close()
		ps.mu.Lock()
		defer ps.mu.Unlock()
		for _, p := range ps.pools {
			// a destroyed connection counts as acquired until pgxpool's
			// destructor has closed it, in the background
			for until := time.Now().Add(5 * time.Second); p.Stat().AcquiredConns() != 0 && time.Now().Before(until); {
				time.Sleep(10 * time.Millisecond)
			}
			if n := p.Stat().AcquiredConns(); n != 0 {
				t.Errorf("pgxlock: %d connection(s) of the pool still acquired", n)
			}
			p.Close()
		}
	})
	return ps
}

// pool returns the pool of the size the view was given (pgxPoolConns when
// unbounded).
func (ps *pgxPools) pool() *pgxpool.Pool {
	n := int32(ps.db.Stats().MaxOpenConnections)
	if n == 0 {
		n = pgxPoolConns
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if p := ps.pools[n]; p != nil {
		return p
	}
	cfg, err := pgxpool.ParseConfig(ps.dsn)
	if err != nil {
		panic(err) // the DSN was parsed before
	}
	cfg.MaxConns = n
	if ps.tracer != nil {
		cfg.ConnConfig.Tracer = ps.tracer
	}
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		panic(err)
	}
	ps.pools[n] = p
	return p
}

// pgxView is the view's connector: each connection is one acquired from
// the pool, released to it (never kept idle by database/sql) when the view
// is done with it, so that the view's idle connection is the pool's.
type pgxView struct{ ps *pgxPools }

func (v pgxView) Connect(ctx context.Context) (driver.Conn, error) {
	c, err := stdlib.GetPoolConnector(v.ps.pool()).Connect(ctx)
	if err != nil {
		return nil, err
	}
	return viewConn{c.(*stdlib.Conn)}, nil
}

func (v pgxView) Driver() driver.Driver { return stdlib.GetDefaultDriver() }

// viewConn is a connection of the view: database/sql closes it (which
// releases it to the pool) rather than keep it idle.
type viewConn struct{ *stdlib.Conn }

func (viewConn) IsValid() bool { return false }

// pgxPoolConns is the size of the suite's pgx pools: database/sql's pools
// of the other adapters are unbounded.
const pgxPoolConns = 32

// pgxOnPool opens pgxlock on a pool of its own to the server db reaches,
// with db's DSN (read from the pgx driver's connector): only a pool of
// pgx's database/sql driver can be followed so, and only PostgreSQL. The
// suite's checks on db (Pool) see db itself.
func pgxOnPool(t *testing.T, dialect string, db *sql.DB) runner {
	t.Helper()
	if dialect != "postgres" {
		t.Skip("pgxlock is PostgreSQL only")
	}
	dsn, ok := pgxDSN(db)
	if !ok {
		t.Skipf("pgxlock works on pgx's own pool; this pool's driver is %T", db.Driver())
	}
	return pgxLocker{pools: newPgxPools(t, dsn)}
}

// pgxDSN returns the DSN a pool of pgx's database/sql driver was opened
// with (sql.Open("pgx", dsn)), found by reflection: the suite's tests build
// such pools, with settings (a frozen proxy, a default isolation level)
// that pgxlock must then meet on its own pool.
func pgxDSN(db *sql.DB) (string, bool) {
	if _, ok := db.Driver().(*stdlib.Driver); !ok {
		return "", false
	}
	c := reflect.ValueOf(db).Elem().FieldByName("connector")
	if !c.IsValid() || c.Kind() != reflect.Interface || c.IsNil() {
		return "", false
	}
	c = c.Elem()
	for c.Kind() == reflect.Pointer {
		c = c.Elem()
	}
	if c.Kind() != reflect.Struct {
		return "", false
	}
	name := c.FieldByName("name")
	if !name.IsValid() || name.Kind() != reflect.String {
		return "", false
	}
	return name.String(), true
}

func (p pgxLocker) with(opts []ormlock.Option) []ormlock.Option {
	if len(p.opts) == 0 {
		return opts
	}
	return append(append([]ormlock.Option(nil), p.opts...), opts...)
}

// pgxFn adapts fn to pgxlock (nil stays nil, for the bad-input tests).
func pgxFn(fn func(txn) error) func(context.Context, pgx.Tx) error {
	if fn == nil {
		return nil
	}
	return func(ctx context.Context, tx pgx.Tx) error { return fn(pgxTx{ctx, tx}) }
}

func (p pgxLocker) Transaction(ctx context.Context, key any, fn func(txn) error, opts ...ormlock.Option) error {
	return pgxlock.Transaction(ctx, p.pools.pool(), keyOf(key), pgxFn(fn), p.with(opts)...)
}

func (p pgxLocker) Session(ctx context.Context, key any, fn func(context.Context) error, opts ...ormlock.Option) error {
	return pgxlock.Session(ctx, p.pools.pool(), keyOf(key), fn, p.with(opts)...)
}

func (p pgxLocker) RunOnce(ctx context.Context, job string, slot time.Time, fn func(txn) error, opts ...ormlock.Option) error {
	return pgxlock.RunOnce(ctx, p.pools.pool(), job, slot, pgxFn(fn), p.with(opts)...)
}

func (p pgxLocker) RunScheduled(ctx context.Context, job string, schedule ormlock.Schedule, fn func(txn) error, opts ...ormlock.Option) error {
	return pgxlock.RunScheduled(ctx, p.pools.pool(), job, schedule, pgxFn(fn), p.with(opts)...)
}

func (p pgxLocker) Migrate(ctx context.Context, opts ...ormlock.Option) error {
	return pgxlock.Migrate(ctx, p.pools.pool(), p.with(opts)...)
}

func (p pgxLocker) Runs(ctx context.Context, job string, limit int, opts ...ormlock.Option) ([]ormlock.Run, error) {
	return pgxlock.Runs(ctx, p.pools.pool(), job, limit, p.with(opts)...)
}

func (p pgxLocker) Holder(ctx context.Context, key any, opts ...ormlock.Option) (ormlock.HolderInfo, error) {
	return pgxlock.Holder(ctx, p.pools.pool(), keyOf(key), p.with(opts)...)
}

func (p pgxLocker) Pool() *sql.DB { return p.pools.db }

func (p pgxLocker) Prune(ctx context.Context, olderThan time.Duration, opts ...ormlock.Option) (int64, error) {
	return pgxlock.Prune(ctx, p.pools.pool(), olderThan, p.with(opts)...)
}

func (p pgxLocker) AdvanceFences(ctx context.Context, by int64, opts ...ormlock.Option) (int64, error) {
	return pgxlock.AdvanceFences(ctx, p.pools.pool(), by, p.with(opts)...)
}

func (p pgxLocker) PlainTx(ctx context.Context) error {
	tx, err := p.pools.pool().Begin(ctx)
	if err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func (p pgxTx) Insert(owner string, n int) error {
	_, err := p.tx.Exec(p.ctx, insertItem("postgres"), owner, n)
	return err
}

func (p pgxTx) Exec(query string, args ...any) error {
	_, err := p.tx.Exec(p.ctx, query, args...)
	return err
}

func (p pgxTx) Scan(query string, dest ...any) error {
	return p.tx.QueryRow(p.ctx, query).Scan(dest...)
}

func (p pgxTx) Context() context.Context { return p.ctx }

func (p pgxTx) FencingToken() (int64, bool) { return ormlock.FencingToken(p.ctx) }
