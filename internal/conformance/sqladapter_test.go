package conformance_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/enttest"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/sqllock"
)

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

func (s sqlTx) QueryInt(query string) (n int64, err error) {
	err = s.Scan(query, &n)
	return n, err
}

func (s sqlTx) Scan(query string, dest ...any) error {
	return s.tx.QueryRowContext(s.ctx, query).Scan(dest...)
}

func (s sqlTx) Context() context.Context { return s.ctx }

func (s sqlTx) FencingToken() (int64, bool) { return ormlock.FencingToken(s.ctx) }

// sqlBeginRoundTrips sets sqllock's round trips in want: fn gets a *sql.Tx,
// which database/sql begins with a BEGIN of its own, so the lock is a
// statement of its own, as in the hand-written protocol (3 round trips);
// the wait sets lock_timeout first (4, as a hand-written wait does).
func sqlBeginRoundTrips(a adapter, want map[string]int) {
	if a.name != "sqllock" {
		return
	}
	want["Transaction"] = 3
	want["Transaction, loser"] = 3
	want["Transaction (wait)"] = 4
	want["Transaction (wait), loser"] = 4
}
