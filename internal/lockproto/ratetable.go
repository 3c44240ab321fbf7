package lockproto

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
)

// The rate table (ormlock.Rate, rate.go): n token rows per rate key,
//
//	rkey     the key as MySQL/MariaDB name it (keys.MySQL: namespace and
//	         the 64-byte rule applied), on every server
//	tok      the token's index, 1 to n
//	free_at  when the token is free again, in microseconds since the Unix
//	         epoch by the database server's clock (0: never used)
//
// primary key (rkey, tok) and no other index: a take walks the key's
// tokens in the primary key from a random one, and marking a token changes
// no indexed column (on PostgreSQL a HOT update, in the room fillfactor 50
// leaves; on InnoDB an update in place). Migrate creates it beside the
// ledger (both servers); RateTable.CreateSQL prints its DDL.

// RateTable is the rate table of one server.
type RateTable struct {
	s    Server
	sql  rateServer
	name string
	q    string
}

// NewRateTable validates name (config.ValidIdentifier) for dialect d.
func NewRateTable(d Dialect, name string) (*RateTable, error) {
	if err := config.ValidIdentifier("rate table name", name); err != nil {
		return nil, err
	}
	s, err := ServerOf(d)
	if err != nil {
		return nil, err
	}
	return &RateTable{s: s, sql: PerServer[rateServer](s, pgRate{}, myRate{}), name: name, q: s.Quote(name)}, nil
}

// Name returns the table's (unquoted) name.
func (t *RateTable) Name() string { return t.name }

// CreateSQL returns the statements that create the table if it does not
// exist (one on each server).
func (t *RateTable) CreateSQL() []string { return t.sql.createSQL(t) }

// Create runs CreateSQL on q.
func (t *RateTable) Create(ctx context.Context, q Querier) error {
	for _, stmt := range t.CreateSQL() {
		if _, err := q.ExecContext(ctx, stmt); err != nil {
			return errs.Wrap(err, "create rate table %q", t.name)
		}
	}
	return nil
}

// wrap annotates an error of a statement on the table, with a hint when
// the table is missing.
func (t *RateTable) wrap(what string, err error) error {
	if t.s.MissingTable(err) {
		return errs.Wrap(err, "%s: rate table %q is missing: run Migrate (or the statements of ormlock.RateTableSQL) first", what, t.name)
	}
	return errs.Wrap(err, "%s", what)
}

// rateTake is what one take of a token read: the server's clock, the
// token taken (0: none), and on a refusal how many token rows the key has
// (of 1 to n), how many of them the server shows free but could not lock
// (held by transactions still open), and when the first token in use by
// a committed transaction is free again (0: none is).
type rateTake struct {
	now, tok, rows, open, due int64
	// again: the take met a token marked after its snapshot (PostgreSQL
	// above READ COMMITTED) and may be tried again at once
	again bool
}

// rateServer is the rate table's SQL on one family of servers.
type rateServer interface {
	createSQL(t *RateTable) []string
	// take takes a free token of rkey among 1 to n in the transaction q,
	// marking it used for per.
	take(ctx context.Context, t *RateTable, q Querier, rkey string, n int, per time.Duration) (rateTake, error)
	// fill inserts rkey's missing token rows 1 to n, free, on q
	// (autocommit: never in fn's transaction, whose end could keep
	// another filler waiting).
	fill(ctx context.Context, t *RateTable, q Querier, rkey string, n int) error
	// prune deletes at most batch token rows free for more than idle
	// (microseconds, by the server's clock) that no transaction holds,
	// and returns how many.
	prune(ctx context.Context, t *RateTable, db *sql.DB, idle int64, batch int) (int64, error)
	// figures reads rkey's tokens 1 to n without locking any: the clock,
	// the rows, how many are free by their committed mark (open), and the
	// first free_at to come (due); tok is 0.
	figures(ctx context.Context, t *RateTable, q Querier, rkey string, n int) (rateTake, error)
}

// pgRate is the rate table on PostgreSQL (directly or behind PgBouncer in
// transaction mode: every statement runs in one transaction).
type pgRate struct{}

// pgNowMicros is the server's clock in microseconds since the epoch, at
// the statement (clock_timestamp(), not the transaction's start).
const pgNowMicros = `(extract(epoch FROM clock_timestamp()) * 1000000)::bigint`

func (pgRate) createSQL(t *RateTable) []string {
	return []string{`CREATE TABLE IF NOT EXISTS ` + t.q + ` (
	rkey    varchar(64) NOT NULL,
	tok     integer     NOT NULL,
	free_at bigint      NOT NULL DEFAULT 0,
	PRIMARY KEY (rkey, tok)
) WITH (fillfactor = 50)`}
}

// take is one statement: the clock, the first free token from a random
// one (from, wrapping around) that no open transaction holds (FOR UPDATE
// SKIP LOCKED), marked used until now + per, and, only when none was, the
// refusal's figures. The scan walks the primary key; free_at is in no
// index, so marking a token is a HOT update (fillfactor 50 leaves the room
// for it) and leaves no dead index entry for the next take to step over.
func (pgRate) take(ctx context.Context, t *RateTable, q Querier, rkey string, n int, per time.Duration) (rateTake, error) {
	query := `WITH c AS MATERIALIZED (SELECT ` + pgNowMicros + ` AS now),
a AS (SELECT r.tok FROM ` + t.q + ` r, c WHERE r.rkey = $1 AND r.tok >= $4 AND r.tok <= $2 AND r.free_at <= c.now
	ORDER BY r.tok LIMIT 1 FOR UPDATE OF r SKIP LOCKED),
b AS (SELECT r.tok FROM ` + t.q + ` r, c WHERE r.rkey = $1 AND r.tok < $4 AND r.free_at <= c.now
	ORDER BY r.tok LIMIT 1 FOR UPDATE OF r SKIP LOCKED),
u AS (UPDATE ` + t.q + ` r SET free_at = c.now + $3 FROM c
	WHERE r.rkey = $1 AND r.tok = COALESCE((SELECT tok FROM a), (SELECT tok FROM b)) RETURNING r.tok)
SELECT c.now, COALESCE(u.tok, 0),
	CASE WHEN u.tok IS NULL THEN (SELECT count(*) FROM ` + t.q + ` s WHERE s.rkey = $1 AND s.tok <= $2) ELSE 0 END,
	CASE WHEN u.tok IS NULL THEN (SELECT count(*) FROM ` + t.q + ` s WHERE s.rkey = $1 AND s.tok <= $2 AND s.free_at <= c.now) ELSE 0 END,
	CASE WHEN u.tok IS NULL THEN (SELECT COALESCE(min(s.free_at), 0) FROM ` + t.q + ` s WHERE s.rkey = $1 AND s.tok <= $2 AND s.free_at > c.now) ELSE 0 END
FROM c LEFT JOIN u ON true`
	var r rateTake
	err := q.QueryRowContext(ctx, query, rkey, n, per.Microseconds(), 1+rand.IntN(n)).Scan(&r.now, &r.tok, &r.rows, &r.open, &r.due)
	return r, err
}

func (pgRate) fill(ctx context.Context, t *RateTable, q Querier, rkey string, n int) error {
	_, err := q.ExecContext(ctx, `INSERT INTO `+t.q+` (rkey, tok, free_at) SELECT $1, g, 0 FROM generate_series(1, $2::integer) g ON CONFLICT DO NOTHING`, rkey, n)
	return err
}

func (pgRate) prune(ctx context.Context, t *RateTable, db *sql.DB, idle int64, batch int) (int64, error) {
	res, err := db.ExecContext(ctx, `DELETE FROM `+t.q+` WHERE (rkey, tok) IN (SELECT rkey, tok FROM `+t.q+` WHERE free_at < `+pgNowMicros+` - $1 LIMIT $2 FOR UPDATE SKIP LOCKED)`, idle, batch)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (pgRate) figures(ctx context.Context, t *RateTable, q Querier, rkey string, n int) (rateTake, error) {
	var r rateTake
	err := q.QueryRowContext(ctx, `WITH c AS MATERIALIZED (SELECT `+pgNowMicros+` AS now)
SELECT c.now, count(s.tok), count(s.tok) FILTER (WHERE s.free_at <= c.now), COALESCE(min(s.free_at) FILTER (WHERE s.free_at > c.now), 0)
FROM c LEFT JOIN `+t.q+` s ON s.rkey = $1 AND s.tok <= $2 GROUP BY c.now`, rkey, n).Scan(&r.now, &r.rows, &r.open, &r.due)
	return r, err
}

// myRate is the rate table on MySQL 8.0 and MariaDB 10.6 or later (SKIP
// LOCKED).
type myRate struct{}

// myNowMicros is the server's clock in microseconds since the epoch
// (UTC_TIMESTAMP does not depend on the session's time zone).
const myNowMicros = `TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))`

func (myRate) createSQL(t *RateTable) []string {
	return []string{"CREATE TABLE IF NOT EXISTS " + t.q + ` (
	rkey    VARBINARY(255) NOT NULL,
	tok     INT            NOT NULL,
	free_at BIGINT         NOT NULL DEFAULT 0,
	PRIMARY KEY (rkey, tok)
) ENGINE=InnoDB`}
}

// take: the first free token from a random one (a second statement
// wraps around when none was free from there), then its mark (MySQL and
// MariaDB have no UPDATE … SKIP LOCKED), or on a refusal one read of the
// figures. At REPEATABLE READ InnoDB keeps locked every row a locking read
// examined, so the tokens in use that the scan stepped over stay locked
// until the transaction ends: another take skips them meanwhile (fewer
// admitted, never more; READ COMMITTED releases them).
func (myRate) take(ctx context.Context, t *RateTable, q Querier, rkey string, n int, per time.Duration) (rateTake, error) {
	var r rateTake
	from := 1 + rand.IntN(n)
	err := q.QueryRowContext(ctx, `SELECT tok, `+myNowMicros+` FROM `+t.q+` WHERE rkey = ? AND tok >= ? AND tok <= ? AND free_at <= `+myNowMicros+
		` ORDER BY tok LIMIT 1 FOR UPDATE SKIP LOCKED`, rkey, from, n).Scan(&r.tok, &r.now)
	if errors.Is(err, sql.ErrNoRows) && from > 1 {
		err = q.QueryRowContext(ctx, `SELECT tok, `+myNowMicros+` FROM `+t.q+` WHERE rkey = ? AND tok < ? AND free_at <= `+myNowMicros+
			` ORDER BY tok LIMIT 1 FOR UPDATE SKIP LOCKED`, rkey, from).Scan(&r.tok, &r.now)
	}
	switch {
	case err == nil:
		_, err = q.ExecContext(ctx, `UPDATE `+t.q+` SET free_at = ? WHERE rkey = ? AND tok = ?`, r.now+per.Microseconds(), rkey, r.tok)
		return r, err
	case errors.Is(err, sql.ErrNoRows):
		// none: the figures are read after the ROLLBACK, outside the
		// transaction (at SERIALIZABLE InnoDB would make a plain read of
		// the rows a locking one, waiting for the open holders)
		return rateTake{rows: -1}, nil
	}
	return r, err
}

func (myRate) figures(ctx context.Context, t *RateTable, q Querier, rkey string, n int) (rateTake, error) {
	var r rateTake
	err := q.QueryRowContext(ctx, `SELECT c.now, COUNT(s.tok), COALESCE(SUM(s.free_at <= c.now), 0), COALESCE(MIN(CASE WHEN s.free_at > c.now THEN s.free_at END), 0)
FROM (SELECT `+myNowMicros+` AS now) c LEFT JOIN `+t.q+` s ON s.rkey = ? AND s.tok <= ? GROUP BY c.now`, rkey, n).Scan(&r.now, &r.rows, &r.open, &r.due)
	return r, err
}

func (myRate) fill(ctx context.Context, t *RateTable, q Querier, rkey string, n int) error {
	const batch = 500
	for lo := 1; lo <= n; lo += batch {
		var b strings.Builder
		args := make([]any, 0, 2*batch)
		for i := lo; i <= min(n, lo+batch-1); i++ {
			if i > lo {
				b.WriteByte(',')
			}
			b.WriteString("(?, ?, 0)")
			args = append(args, rkey, i)
		}
		if _, err := q.ExecContext(ctx, "INSERT IGNORE INTO "+t.q+" (rkey, tok, free_at) VALUES "+b.String(), args...); err != nil {
			return err
		}
	}
	return nil
}

func (myRate) prune(ctx context.Context, t *RateTable, db *sql.DB, idle int64, batch int) (int64, error) {
	// InnoDB's DELETE takes no SKIP LOCKED: the rows are picked by a
	// locking read that skips those an open transaction holds, in a short
	// READ COMMITTED transaction of their own, and deleted by key
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := tx.QueryContext(ctx, `SELECT rkey, tok FROM `+t.q+` WHERE free_at < `+myNowMicros+` - ? LIMIT `+strconv.Itoa(batch)+` FOR UPDATE SKIP LOCKED`, idle)
	if err != nil {
		return 0, err
	}
	var (
		cond []string
		args []any
	)
	for rows.Next() {
		var rkey []byte
		var tok int64
		if err := rows.Scan(&rkey, &tok); err != nil {
			rows.Close()
			return 0, err
		}
		cond = append(cond, "(rkey = ? AND tok = ?)")
		args = append(args, rkey, tok)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(cond) == 0 {
		return 0, err
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM `+t.q+` WHERE `+strings.Join(cond, " OR "), args...)
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	return n, tx.Commit()
}

// rateVersionVerdict refuses, for Rate, a MySQL-protocol server without a
// correct FOR UPDATE SKIP LOCKED: MariaDB before 10.6, MySQL before 8.0,
// and a Galera node (SKIP LOCKED is local to the node, and a conflict is
// found only at COMMIT, after fn ran). nil when it has one.
func rateVersionVerdict(version string, galera bool) error {
	if galera {
		return fmt.Errorf("a Galera cluster node: FOR UPDATE SKIP LOCKED is local to one node and a conflicting take of a token is found only at COMMIT (certification), after fn ran, so two nodes could both hand out the last token")
	}
	major, minor, ok := versionNumbers(version)
	switch {
	case !ok:
		return nil // an engine that does not say; the statement answers for itself
	case strings.Contains(strings.ToLower(version), "mariadb") && (major < 10 || major == 10 && minor < 6):
		return fmt.Errorf("MariaDB %d.%d: FOR UPDATE SKIP LOCKED, which Rate takes its tokens with, needs MariaDB 10.6 or later", major, minor)
	case !strings.Contains(strings.ToLower(version), "mariadb") && major < 8:
		return fmt.Errorf("MySQL %d.%d: FOR UPDATE SKIP LOCKED, which Rate takes its tokens with, needs MySQL 8.0 or later", major, minor)
	}
	return nil
}

// versionNumbers reads "X.Y" at the start of a version string.
func versionNumbers(v string) (major, minor int, ok bool) {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	digits := strings.TrimRightFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' })
	minor, err2 := strconv.Atoi(digits)
	return major, minor, err1 == nil && err2 == nil
}

// Prune deletes the token rows that have been free for more than olderThan
// by the server's clock and that no open transaction holds, in batches of
// at most batch rows (each its own statement or short transaction), and
// returns how many it deleted; a missing table is no error (nothing to
// prune). Deleting a free token never lets a take through that the limit
// refuses: a key with fewer than n rows refills them (free) when a take
// finds none free, as on its first use, so a pruned token costs its key
// one more round trip then. The rows are not per window: a key keeps at
// most n, so Prune is for the keys no longer used.
func (t *RateTable) Prune(ctx context.Context, db *sql.DB, olderThan time.Duration, batch int) (int64, error) {
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, err := t.sql.prune(ctx, t, db, olderThan.Microseconds(), batch)
		total += n
		switch {
		case err != nil && t.s.MissingTable(err):
			return total, nil
		case err != nil:
			return total, t.wrap("prune", err)
		case n < int64(batch):
			return total, nil
		}
	}
}
