package webui

import (
	"context"
	"database/sql"
	"errors"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/ledger"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/verbs"
)

// What the view reads, and how. Every read runs in a read-only READ
// COMMITTED transaction (BEGIN ISOLATION LEVEL READ COMMITTED READ ONLY;
// SET TRANSACTION ISOLATION LEVEL READ COMMITTED, START TRANSACTION READ
// ONLY), one per section of a page, so that a missing fence table does not
// cost the runs; READ COMMITTED, so that a run read again after its lock
// was found free is read as it is now, not as the transaction's first read
// saw it (MySQL's default, REPEATABLE READ, would). Everything is read by
// the library's own code, so the view shows what the verbs and the command
// see: the server's dialect as sqllock tells it (lockproto.DialectOfDB),
// the server check and the holders as the verbs' (internal/verbs, through
// a binding of the view's transaction), the runs (ledger.Table.Runs and
// MarkStale), the jobs (ledger.Table.Jobs: a walk of the ledger's primary
// key, one index entry per job) and the fence counters
// (lockproto.FenceTable's reads: the first rows of the namespace's primary
// key range).

// reader reads one database for the view.
type reader struct {
	db *sql.DB
	s  *settings
}

func newReader(db *sql.DB, s *settings) *reader { return &reader{db: db, s: s} }

// errUnknownServer says that the server is neither PostgreSQL nor
// MySQL/MariaDB.
var errUnknownServer = errors.New("ormlock: webui: the server is neither PostgreSQL nor MySQL/MariaDB")

// dialectOf returns the dialect: the driver's, or the server's answer
// (SELECT version(), in a read-only transaction), asked once per pool.
func (r *reader) dialectOf(ctx context.Context) (lockproto.Dialect, error) {
	d, ok, err := lockproto.DialectOfDB(ctx, r.db, func(query func(q lockproto.CheckQuerier) error) error {
		return r.ro(ctx, func(tx *sql.Tx) error { return query(tx) })
	})
	if err == nil && !ok {
		err = errUnknownServer
	}
	return d, err
}

// ro runs f in a read-only transaction, rolled back when f returns (it
// wrote nothing to commit). The transaction runs on a connection taken
// for it, closed last: when the request's deadline ends the transaction,
// database/sql rolls it back in a goroutine of its own, and closing the
// connection waits for that, so the connection is back in the pool before
// the page gives up its turn at the database (at most maxConcurrent in
// use, not one more while a cancelled one is still being rolled back).
func (r *reader) ro(ctx context.Context, f func(tx *sql.Tx) error) error {
	conn, err := r.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelReadCommitted})
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	return f(tx)
}

func (r *reader) cfg() config.Config {
	return config.New(ormlock.WithNamespace(r.s.namespace), ormlock.WithLedgerTable(r.s.ledger), ormlock.WithRateTable(r.s.rateTable))
}

// binder binds the view's transaction tx, on a server of dialect d, for
// the verbs' bodies: the server check, Holder.
type binder struct {
	r  *reader
	d  lockproto.Dialect
	tx *sql.Tx
}

func (b binder) Nil() string { return "" }

func (b binder) Bind(_ context.Context, _ string, opts []config.Option) (verbs.Pool, error) {
	return verbs.Pool{Pkg: "webui", Dialect: b.d, DB: b.r.db, Cfg: b.r.cfg().With(opts...), Tx: b.tx}, nil
}

// checkServer refuses a server whose locks exclude nobody (a hot standby,
// a Galera node...) with the verbs' own check, asked in tx and cached per
// pool as theirs is: an error wrapping ormlock.ErrUnsupportedDialect that
// names the reason.
func (r *reader) checkServer(ctx context.Context, tx *sql.Tx, d lockproto.Dialect) error {
	p, err := verbs.Open(ctx, binder{r, d, tx}, "webui", "webui", nil, verbs.Args{})
	if err != nil {
		return err
	}
	return p.CheckPool(ctx)
}

// jobs lists at most n jobs after the name after.
func (r *reader) jobs(ctx context.Context, tx *sql.Tx, d lockproto.Dialect, after string, n int) ([]string, error) {
	t, err := ledger.NewTable(d, r.s.ledger)
	if err != nil {
		return nil, err
	}
	out, err := t.Jobs(ctx, tx, r.s.namespace, after, n)
	if err != nil {
		return nil, r.tableError(err, r.s.ledger, "list jobs")
	}
	return out, nil
}

// runs reads job's latest n runs and, when budget is not nil, marks the
// stale ones as the verbs' Runs does (ledger.Table.MarkStale: each
// 'running' run's lock looked up after the rows were read, and the row read
// again in tx, which is READ COMMITTED, when its lock is free), at most
// *budget of them, which it lowers by as many; the 'running' runs it does
// not look at are shown as running.
func (r *reader) runs(ctx context.Context, tx *sql.Tx, d lockproto.Dialect, job string, n int, budget *int) ([]ormlock.Run, error) {
	t, err := ledger.NewTable(d, r.s.ledger)
	if err != nil {
		return nil, err
	}
	rs, err := t.Runs(ctx, tx, r.s.namespace, job, n)
	if err == nil && budget != nil && *budget > 0 {
		var looked int
		looked, err = t.MarkStale(ctx, tx, nil, r.cfg(), rs, *budget)
		*budget -= looked
	}
	return ledger.RunsAs[ormlock.Run](rs, err)
}

// holder looks k up with the verbs' Holder, in tx.
func (r *reader) holder(ctx context.Context, tx *sql.Tx, d lockproto.Dialect, k ormlock.Key) (ormlock.HolderInfo, error) {
	return verbs.Holder(ctx, binder{r, d, tx}, "webui", k, nil)
}

// fenceTable returns the fence table, or nil when the ledger's name leaves
// no room for the suffix (no fence table exists then).
func (r *reader) fenceTable(d lockproto.Dialect) *lockproto.FenceTable {
	ft, err := lockproto.NewFenceTable(d, r.s.ledger)
	if err != nil {
		return nil
	}
	return ft
}

// fences lists the first n counters of the namespace.
func (r *reader) fences(ctx context.Context, tx *sql.Tx, d lockproto.Dialect, n int) ([]lockproto.FenceCounter, error) {
	ft := r.fenceTable(d)
	if ft == nil {
		return nil, nil
	}
	out, err := ft.Counters(ctx, tx, r.s.namespace, n)
	if err != nil {
		return nil, r.tableError(err, ft.Name(), "read fence counters")
	}
	return out, nil
}

// token reads the latest fencing token of k (0 and false when none).
func (r *reader) token(ctx context.Context, tx *sql.Tx, d lockproto.Dialect, k ormlock.Key) (int64, bool, error) {
	ft := r.fenceTable(d)
	if ft == nil {
		return 0, false, nil
	}
	tok, ok, err := ft.Token(ctx, tx, r.s.namespace, lockproto.FenceID(k))
	if err != nil {
		return 0, false, r.tableError(err, ft.Name(), "read a fencing token")
	}
	return tok, ok, nil
}

// missingTableError is a table the view reads that does not exist.
type missingTableError struct{ table, what string }

func (e *missingTableError) Error() string {
	return "ormlock: webui: table " + e.table + " does not exist (create it with Migrate or ormlock migrate): " + e.what
}

func (r *reader) tableError(err error, table, what string) error {
	if lockproto.IsMissingTable(err) {
		return &missingTableError{table: table, what: what}
	}
	return err
}
