package conformance_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	entsql "entgo.io/ent/dialect/sql"
	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest/ent"
)

// runner is what the RunOnce, Holder and observer suites need of an
// adapter, on top of locker: gormlock and entlock implement it (the
// hand-written SQL locker does not).
type runner interface {
	locker
	// RunOnce runs fn at most once per (job, slot).
	RunOnce(ctx context.Context, job string, slot time.Time, fn func(tx txn) error, opts ...ormlock.Option) error
	// RunScheduled runs fn at most once per slot of schedule at the current
	// time.
	RunScheduled(ctx context.Context, job string, schedule ormlock.Schedule, fn func(tx txn) error, opts ...ormlock.Option) error
	// Migrate creates the ledger table.
	Migrate(ctx context.Context, opts ...ormlock.Option) error
	// Runs reads the ledger of job.
	Runs(ctx context.Context, job string, limit int, opts ...ormlock.Option) ([]ormlock.Run, error)
	// Holder asks who holds key.
	Holder(ctx context.Context, key any, opts ...ormlock.Option) (ormlock.HolderInfo, error)
	// Pool is the adapter's database/sql pool.
	Pool() *sql.DB
	// Prune deletes the ledger's finished rows older than olderThan.
	Prune(ctx context.Context, olderThan time.Duration, opts ...ormlock.Option) (int64, error)
	// AdvanceFences moves every fencing counter of the namespace by by.
	AdvanceFences(ctx context.Context, by int64, opts ...ormlock.Option) (int64, error)
	// PlainTx runs an empty transaction of the ORM's own, without a lock.
	PlainTx(ctx context.Context) error
}

var (
	_ runner = gormLocker{}
	_ runner = entLocker{}
)

// claimInTx reports whether the adapter runs a claim-mode fn in a
// transaction of its own (entlock, sqllock, pgxlock) rather than outside
// any transaction (gormlock): whether fn's writes are visible while it
// runs, and whether they survive fn's failure.
func claimInTx(a adapter) bool { return a.name != "gormlock" }

func (g gormLocker) RunOnce(ctx context.Context, job string, slot time.Time, fn func(txn) error, opts ...ormlock.Option) error {
	return gormlock.RunOnce(g.db.WithContext(ctx), job, slot, gormFn(fn), opts...)
}

func (g gormLocker) RunScheduled(ctx context.Context, job string, schedule ormlock.Schedule, fn func(txn) error, opts ...ormlock.Option) error {
	return gormlock.RunScheduled(g.db.WithContext(ctx), job, schedule, gormFn(fn), opts...)
}

func (e entLocker) RunScheduled(ctx context.Context, job string, schedule ormlock.Schedule, fn func(txn) error, opts ...ormlock.Option) error {
	return entlock.RunScheduled(ctx, e.client, job, schedule, entFn(ctx, fn), opts...)
}

func (g gormLocker) Migrate(ctx context.Context, opts ...ormlock.Option) error {
	return gormlock.Migrate(g.db.WithContext(ctx), opts...)
}

func (g gormLocker) Runs(ctx context.Context, job string, limit int, opts ...ormlock.Option) ([]ormlock.Run, error) {
	return gormlock.Runs(g.db.WithContext(ctx), job, limit, opts...)
}

func (g gormLocker) Holder(ctx context.Context, key any, opts ...ormlock.Option) (ormlock.HolderInfo, error) {
	return gormlock.Holder(g.db.WithContext(ctx), keyOf(key), opts...)
}

func (e entLocker) RunOnce(ctx context.Context, job string, slot time.Time, fn func(txn) error, opts ...ormlock.Option) error {
	return entlock.RunOnce(ctx, e.client, job, slot, entFn(ctx, fn), opts...)
}

func (e entLocker) Migrate(ctx context.Context, opts ...ormlock.Option) error {
	return entlock.Migrate(ctx, e.client, opts...)
}

func (e entLocker) Runs(ctx context.Context, job string, limit int, opts ...ormlock.Option) ([]ormlock.Run, error) {
	return entlock.Runs(ctx, e.client, job, limit, opts...)
}

func (e entLocker) Holder(ctx context.Context, key any, opts ...ormlock.Option) (ormlock.HolderInfo, error) {
	return entlock.Holder(ctx, e.client, keyOf(key), opts...)
}

func (g gormLocker) Pool() *sql.DB {
	db, err := g.db.DB()
	if err != nil {
		panic(err)
	}
	return db
}

func (e entLocker) Pool() *sql.DB { return e.db }

func (g gormLocker) Prune(ctx context.Context, olderThan time.Duration, opts ...ormlock.Option) (int64, error) {
	return gormlock.Prune(g.db.WithContext(ctx), olderThan, opts...)
}

func (e entLocker) Prune(ctx context.Context, olderThan time.Duration, opts ...ormlock.Option) (int64, error) {
	return entlock.Prune(ctx, e.client, olderThan, opts...)
}

func (g gormLocker) AdvanceFences(ctx context.Context, by int64, opts ...ormlock.Option) (int64, error) {
	return gormlock.AdvanceFences(g.db.WithContext(ctx), by, opts...)
}

func (e entLocker) AdvanceFences(ctx context.Context, by int64, opts ...ormlock.Option) (int64, error) {
	return entlock.AdvanceFences(ctx, e.client, by, opts...)
}

func (g gormLocker) PlainTx(ctx context.Context) error {
	return g.db.WithContext(ctx).Transaction(func(*gorm.DB) error { return nil })
}

// PlainTx runs on a client whose driver is not wrapped.
func (e entLocker) PlainTx(ctx context.Context) error {
	tx, err := ent.NewClient(ent.Driver(entsql.OpenDB(e.dialect, e.db))).Tx(ctx)
	if err != nil {
		return err
	}
	return tx.Commit()
}

func (g gormTx) FencingToken() (int64, bool) { return gormlock.FencingToken(g.tx) }
func (e entTx) FencingToken() (int64, bool)  { return entlock.FencingToken(e.tx) }
func (r rawTx) FencingToken() (int64, bool)  { return 0, false }

func (g gormTx) Context() context.Context { return g.tx.Statement.Context }
func (e entTx) Context() context.Context  { return e.ctx }
func (r rawTx) Context() context.Context  { return r.ctx }

func (g gormTx) Scan(query string, dest ...any) error { return g.tx.Raw(query).Row().Scan(dest...) }

func (e entTx) Scan(query string, dest ...any) error {
	rows, err := e.tx.QueryContext(e.ctx, query)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		return errors.Join(errors.New("no row"), rows.Err())
	}
	return errors.Join(rows.Scan(dest...), rows.Err())
}

func (r rawTx) Scan(query string, dest ...any) error {
	return r.tx.QueryRowContext(r.ctx, query).Scan(dest...)
}

func (g gormTx) Exec(query string, args ...any) error { return g.tx.Exec(query, args...).Error }

func (g gormTx) QueryInt(query string) (n int64, err error) {
	err = g.Scan(query, &n)
	return n, err
}

func (e entTx) Exec(query string, args ...any) error {
	_, err := e.tx.ExecContext(e.ctx, query, args...)
	return err
}

func (e entTx) QueryInt(query string) (n int64, err error) {
	err = e.Scan(query, &n)
	return n, err
}

func (r rawTx) Exec(query string, args ...any) error {
	_, err := r.tx.ExecContext(r.ctx, query, args...)
	return err
}

func (r rawTx) QueryInt(query string) (n int64, err error) {
	err = r.Scan(query, &n)
	return n, err
}

// openRunner opens adapter a on a new pool of kind k as a runner.
func openRunner(t *testing.T, a adapter, k testdb.Kind) runner {
	t.Helper()
	return a.open(t, k).(runner)
}

// ledgerTable creates the test's own ledger table (and its fence table)
// through r and drops both after the test.
func ledgerTable(t *testing.T, k testdb.Kind, r runner) string {
	t.Helper()
	name := testdb.Table(t, k, "c")
	if err := r.Migrate(context.Background(), ormlock.WithLedgerTable(name)); err != nil {
		t.Fatalf("Migrate(%s): %v", name, err)
	}
	return name
}

// runsOf reads the ledger of job through r.
func runsOf(t *testing.T, r runner, tbl, job string) []ormlock.Run {
	t.Helper()
	rs, err := r.Runs(context.Background(), job, 1000, ormlock.WithLedgerTable(tbl))
	if err != nil {
		t.Fatalf("Runs: %v", err)
	}
	return rs
}
