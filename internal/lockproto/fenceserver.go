package lockproto

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/schema"
)

// fenceServer is the fence table's SQL on one server (fence.go says how
// a token is drawn on each).
type fenceServer interface {
	// fenceCreateSQL is the CREATE TABLE IF NOT EXISTS of the table q
	// (quoted).
	fenceCreateSQL(q string) string
	// fenceAdvanceSQL adds $1 to every counter of namespace $2.
	fenceAdvanceSQL(q string) string
	// tokenOnPool reports whether a token is committed on another
	// connection of the pool than the lock's (PostgreSQL: the lock's
	// transaction stays open while fn runs), rather than on the lock's
	// own connection outside any transaction (MySQL/MariaDB).
	tokenOnPool() bool
	// tokenHolder is what issuing o's token checks or needs of o's lock.
	tokenHolder(o *Op) (Holder, error)
	// issueToken draws the next token of (ns, id) in t on q (FenceTable.Issue).
	issueToken(ctx context.Context, t *FenceTable, q Querier, ns, id string, h Holder) (int64, error)
	// fenceReads are the read statements of the table q (fenceread.go).
	fenceReads(q string) fenceReads
}

func (postgresServer) fenceReads(q string) fenceReads { return pgFenceReads(q) }
func (mysqlServer) fenceReads(q string) fenceReads    { return myFenceReads(q) }

func (postgresServer) fenceCreateSQL(q string) string { return schema.Postgres.Fence(q) }
func (mysqlServer) fenceCreateSQL(q string) string    { return schema.MySQL.Fence(q) }

func (postgresServer) fenceAdvanceSQL(q string) string {
	return "UPDATE " + q + " SET token = token + $1 WHERE namespace = $2"
}

func (mysqlServer) fenceAdvanceSQL(q string) string {
	return "UPDATE " + q + " SET token = token + ? WHERE namespace = ?"
}

func (postgresServer) tokenOnPool() bool { return true }
func (mysqlServer) tokenOnPool() bool    { return false }

func (postgresServer) tokenHolder(o *Op) (Holder, error) {
	if o.fence.pid == 0 {
		return Holder{}, fmt.Errorf("ormlock: %s on %q: the lock's backend is unknown: no fencing token was issued", o.Verb, o.Key.String())
	}
	return Holder{PID: o.fence.pid, Key: o.target.pg}, nil
}

func (mysqlServer) tokenHolder(o *Op) (Holder, error) {
	return Holder{PID: o.fence.pid, Key: o.target.pg, Commit: o.my.autocommit == 0}, nil
}

// pgHeld is the condition, evaluated by the issuing statement, that the
// backend $3 still holds the advisory lock ($4, $5, $6: pg_locks' classid,
// objid and objsubid). pg_locks is read live, not from a snapshot.
const pgHeld = `EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid = $3 AND classid = $4::int8::oid AND objid = $5::int8::oid AND objsubid = $6)`

// pgIssueSQL draws a token of the table q. set_config is evaluated for
// the proposed row, before the conflict check, and returns the (non-NULL)
// new value: the literal 1 of a new row. The lock's backend must still
// hold the lock: for a new row when it is inserted, for an existing one
// once its row lock is taken (DO UPDATE's WHERE is evaluated then), so
// that every holder after a loss gets a greater token; otherwise the
// statement writes and returns nothing.
func pgIssueSQL(q string) string {
	return `INSERT INTO ` + q + ` AS f (namespace, lock_key, token)
SELECT $1, $2, (set_config('synchronous_commit', CASE current_setting('synchronous_commit') WHEN 'off' THEN 'local' ELSE current_setting('synchronous_commit') END, true) IS NOT NULL)::int
WHERE ` + pgHeld + `
ON CONFLICT (namespace, lock_key) DO UPDATE SET token = f.token + 1 WHERE ` + pgHeld + `
RETURNING f.token`
}

func (postgresServer) issueToken(ctx context.Context, t *FenceTable, q Querier, ns, id string, h Holder) (int64, error) {
	var tok int64
	classid, objid, sub := pgLockTag(h.Key)
	err := q.QueryRowContext(ctx, pgIssueSQL(t.q), ns, id, int64(h.PID), classid, objid, sub).Scan(&tok)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("%w: %w (backend %d): no fencing token was issued", errs.ErrLockLost, errNotHeld, h.PID)
	}
	if err != nil {
		return 0, t.wrap(err)
	}
	return tok, nil
}

func (mysqlServer) issueToken(ctx context.Context, t *FenceTable, q Querier, ns, id string, h Holder) (int64, error) {
	res, err := q.ExecContext(ctx, "INSERT INTO "+t.q+" (namespace, lock_key, token) VALUES (?, ?, LAST_INSERT_ID(1)) ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(token + 1)", ns, []byte(id))
	if err != nil {
		return 0, t.wrap(err)
	}
	tok, err := res.LastInsertId()
	if err != nil {
		return 0, t.wrap(err)
	}
	if tok <= 0 {
		return 0, t.wrap(fmt.Errorf("LAST_INSERT_ID returned %d", tok))
	}
	if h.Commit {
		// explicit: completion_type must not chain a transaction or end
		// the session (and its lock) here
		if _, err := q.ExecContext(ctx, "COMMIT AND NO CHAIN NO RELEASE"); err != nil {
			return 0, t.wrap(errs.Wrap(err, "COMMIT (autocommit is off)"))
		}
	}
	return tok, nil
}
