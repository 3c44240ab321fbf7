package webui

import (
	"context"
	"database/sql"
	"errors"
	"reflect"
	"strings"
	"sync/atomic"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/ledger"
	"github.com/ormlock/ormlock/internal/lockproto"
)

// What the view reads, and how. Every read runs in a read-only READ
// COMMITTED transaction (BEGIN ISOLATION LEVEL READ COMMITTED READ ONLY;
// SET TRANSACTION ISOLATION LEVEL READ COMMITTED, START TRANSACTION READ
// ONLY), one per section of a page, so that a missing fence table does not
// cost the runs; READ COMMITTED, so that a run read again after its lock
// was found free is read as it is now, not as the transaction's first read
// saw it (MySQL's default, REPEATABLE READ, would). The runs and the
// holders are read by the library's own code (ledger.Table.Runs and
// MarkStale, lockproto.LookupHolder), so the view shows what the verbs and
// the command see; the two statements of its own are plain
// index range reads of the ledger's primary key and of the fence table's:
//
//   - the jobs of a namespace: a walk that reads, per job, the first
//     primary key entry after the previous job (a "loose index scan", which
//     neither server does by itself here; see jobsSQL), at most a page of
//     jobs, so that the cost is that page's, never the ledger's size (no
//     DISTINCT, no GROUP BY over the table);
//   - the fence counters: the first rows of the namespace's primary key
//     range.

// jobsSQL returns the statement listing job names of a namespace (the
// first argument) after a job name (the second), in order. On PostgreSQL it
// is the whole walk, at most n names (the third argument): a recursive
// query whose every step is an index-only scan for the first entry after
// the previous job, stopped by LIMIT 1. On MySQL/MariaDB it is one step,
// sent once per job: MariaDB plans the recursive form's step as a scan of
// the namespace's whole index range (measured: 1.3 million index entries
// read for a page of 26 jobs on a 200,000-row ledger), and GROUP BY or
// DISTINCT read every row of each listed job; a lone step reads one index
// entry.
func jobsSQL(d lockproto.Dialect, table string) string {
	if d == lockproto.Postgres {
		q := `"` + table + `"`
		return `WITH RECURSIVE j(job, n) AS (
	SELECT (SELECT r.job FROM ` + q + ` r WHERE r.namespace = $1 AND r.job > $2 ORDER BY r.job LIMIT 1), 1
	UNION ALL
	SELECT (SELECT r.job FROM ` + q + ` r WHERE r.namespace = $1 AND r.job > j.job ORDER BY r.job LIMIT 1), j.n + 1
	FROM j WHERE j.job IS NOT NULL AND j.n < $3
)
SELECT job FROM j WHERE job IS NOT NULL`
	}
	return "SELECT job FROM `" + table + "` WHERE namespace = ? AND job > ? ORDER BY job LIMIT 1"
}

// firstJobSQL is the first step of the MySQL/MariaDB walk from the start
// (after the empty name): job >= ? rather than job > ?, since the job
// column's collation (utf8mb4_bin, PAD SPACE) compares a name of spaces
// only, which RunOnce refuses but a hand may write, equal to the empty
// string.
func firstJobSQL(table string) string {
	return "SELECT job FROM `" + table + "` WHERE namespace = ? AND job >= ? ORDER BY job LIMIT 1"
}

// fencesSQL lists the first n counters (namespace, limit).
func fencesSQL(d lockproto.Dialect, table string) string {
	if d == lockproto.Postgres {
		return `SELECT lock_key, token FROM "` + table + `" WHERE namespace = $1 ORDER BY lock_key LIMIT $2`
	}
	return "SELECT lock_key, token FROM `" + table + "` WHERE namespace = ? ORDER BY lock_key LIMIT ?"
}

// fenceSQL reads one counter (namespace, lock_key).
func fenceSQL(d lockproto.Dialect, table string) string {
	if d == lockproto.Postgres {
		return `SELECT token FROM "` + table + `" WHERE namespace = $1 AND lock_key = $2`
	}
	return "SELECT token FROM `" + table + "` WHERE namespace = ? AND lock_key = ?"
}

// driverDialects maps the package path of a database/sql driver type to
// its dialect, as sqllock does: the type is looked at, never imported.
var driverDialects = map[string]lockproto.Dialect{
	"github.com/jackc/pgx/v5/stdlib": lockproto.Postgres,
	"github.com/jackc/pgx/v4/stdlib": lockproto.Postgres,
	"github.com/lib/pq":              lockproto.Postgres,
	"github.com/go-sql-driver/mysql": lockproto.MySQL,
}

// reader reads one database for the view.
type reader struct {
	db      *sql.DB
	s       *settings
	dialect atomic.Uint32 // lockproto.Dialect, once known
}

func newReader(db *sql.DB, s *settings) *reader {
	r := &reader{db: db, s: s}
	t := reflect.TypeOf(db.Driver())
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil {
		if d, ok := driverDialects[t.PkgPath()]; ok {
			r.dialect.Store(uint32(d))
		}
	}
	return r
}

// errUnknownServer says that the server is neither PostgreSQL nor
// MySQL/MariaDB.
var errUnknownServer = errors.New("ormlock: webui: the server is neither PostgreSQL nor MySQL/MariaDB")

// dialectOf returns the dialect, asking the server (SELECT version()) once
// when the driver does not tell.
func (r *reader) dialectOf(ctx context.Context) (lockproto.Dialect, error) {
	if d := lockproto.Dialect(r.dialect.Load()); d != 0 {
		return d, nil
	}
	var v string
	if err := r.ro(ctx, func(tx *sql.Tx) error { return tx.QueryRowContext(ctx, "SELECT version()").Scan(&v) }); err != nil {
		return 0, err
	}
	var d lockproto.Dialect
	switch lv := strings.ToLower(v); {
	case strings.Contains(lv, "postgresql"), strings.Contains(lv, "cockroachdb"):
		d = lockproto.Postgres
	case v != "" && v[0] >= '0' && v[0] <= '9':
		d = lockproto.MySQL
	default:
		return 0, errUnknownServer
	}
	r.dialect.Store(uint32(d))
	return d, nil
}

// ro runs f in a read-only transaction, rolled back when f returns (it
// wrote nothing to commit).
func (r *reader) ro(ctx context.Context, f func(tx *sql.Tx) error) error {
	tx, err := r.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelReadCommitted})
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	return f(tx)
}

func (r *reader) cfg() config.Config {
	return config.New(ormlock.WithNamespace(r.s.namespace), ormlock.WithLedgerTable(r.s.ledger))
}

// checkServer refuses a server whose locks exclude nobody (a hot standby,
// a Galera node...) with the library's own check: an error wrapping
// ormlock.ErrUnsupportedDialect that names the reason.
func (r *reader) checkServer(ctx context.Context, tx *sql.Tx, d lockproto.Dialect) error {
	op, err := lockproto.NewOp(d, "webui", keys.Name("webui"), r.cfg())
	if err != nil {
		return err
	}
	return op.CheckServerOn(ctx, r.db, tx)
}

// jobs lists at most n jobs after the name after.
func (r *reader) jobs(ctx context.Context, tx *sql.Tx, d lockproto.Dialect, after string, n int) ([]string, error) {
	q := jobsSQL(d, r.s.ledger)
	var out []string
	if d == lockproto.MySQL {
		step := q
		if after == "" {
			q = firstJobSQL(r.s.ledger)
		}
		for len(out) < n {
			var j string
			err := tx.QueryRowContext(ctx, q, r.s.namespace, after).Scan(&j)
			q = step
			if errors.Is(err, sql.ErrNoRows) {
				break
			}
			if err != nil {
				return nil, r.tableError(err, r.s.ledger, "list jobs")
			}
			out = append(out, j)
			after = j
		}
		return out, nil
	}
	rows, err := tx.QueryContext(ctx, q, r.s.namespace, after, n)
	if err != nil {
		return nil, r.tableError(err, r.s.ledger, "list jobs")
	}
	defer rows.Close()
	for rows.Next() {
		var j string
		if err := rows.Scan(&j); err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, rows.Err()
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

// holder looks k up as the verbs' Holder does.
func (r *reader) holder(ctx context.Context, tx *sql.Tx, d lockproto.Dialect, k ormlock.Key) (ormlock.HolderInfo, error) {
	op, err := lockproto.NewOpHeld(d, "Holder", keys.Key(k), r.cfg(), lockproto.HeldForHolder)
	if err != nil {
		return ormlock.HolderInfo{}, err
	}
	h, err := lockproto.LookupHolder(ctx, tx, op)
	return ormlock.HolderInfo(h), err
}

// fenceTable returns the fence table's name, or "" when the ledger's name
// leaves no room for the suffix (no fence table exists then).
func (r *reader) fenceTable(d lockproto.Dialect) string {
	ft, err := lockproto.NewFenceTable(d, r.s.ledger)
	if err != nil {
		return ""
	}
	return ft.Name()
}

type fence struct {
	key   string
	token int64
}

// fences lists the first n counters of the namespace.
func (r *reader) fences(ctx context.Context, tx *sql.Tx, d lockproto.Dialect, n int) ([]fence, error) {
	name := r.fenceTable(d)
	if name == "" {
		return nil, nil
	}
	rows, err := tx.QueryContext(ctx, fencesSQL(d, name), r.s.namespace, n)
	if err != nil {
		return nil, r.tableError(err, name, "read fence counters")
	}
	defer rows.Close()
	var out []fence
	for rows.Next() {
		var k []byte
		var f fence
		if err := rows.Scan(&k, &f.token); err != nil {
			return nil, err
		}
		f.key = string(k)
		out = append(out, f)
	}
	return out, rows.Err()
}

// token reads the latest fencing token of k (0 and false when none).
func (r *reader) token(ctx context.Context, tx *sql.Tx, d lockproto.Dialect, k ormlock.Key) (int64, bool, error) {
	name := r.fenceTable(d)
	if name == "" {
		return 0, false, nil
	}
	var tok int64
	var id any = lockproto.FenceID(keys.Key(k))
	if d == lockproto.MySQL {
		id = []byte(lockproto.FenceID(keys.Key(k)))
	}
	err := tx.QueryRowContext(ctx, fenceSQL(d, name), r.s.namespace, id).Scan(&tok)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, r.tableError(err, name, "read a fencing token")
	}
	return tok, true, nil
}

// missingTableError is a table the view reads that does not exist.
type missingTableError struct{ table, what string }

func (e *missingTableError) Error() string {
	return "ormlock: webui: table " + e.table + " does not exist (create it with Migrate or ormlock migrate): " + e.what
}

func (r *reader) tableError(err error, table, what string) error {
	if lockproto.SQLState(err) == "42P01" || lockproto.MySQLErrno(err) == 1146 {
		return &missingTableError{table: table, what: what}
	}
	return err
}
