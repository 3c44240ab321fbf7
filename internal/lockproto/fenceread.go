package lockproto

import (
	"context"
	"database/sql"
	"errors"
)

// The fence table's reads (the web view's): plain index range reads of its
// primary key, never a write.

// fenceReads are the read statements of a fence table on one server.
type fenceReads struct {
	counters string // the first counters of a namespace (namespace, limit)
	token    string // one counter (namespace, fence id)
	binaryID bool   // the fence id is sent as bytes (MySQL's VARBINARY)
}

func pgFenceReads(q string) fenceReads {
	return fenceReads{
		counters: `SELECT lock_key, token FROM ` + q + ` WHERE namespace = $1 ORDER BY lock_key LIMIT $2`,
		token:    `SELECT token FROM ` + q + ` WHERE namespace = $1 AND lock_key = $2`,
	}
}

func myFenceReads(q string) fenceReads {
	return fenceReads{
		counters: "SELECT lock_key, token FROM " + q + " WHERE namespace = ? ORDER BY lock_key LIMIT ?",
		token:    "SELECT token FROM " + q + " WHERE namespace = ? AND lock_key = ?",
		binaryID: true,
	}
}

// FenceCounter is one counter of the fence table: its fence id (FenceID,
// JobFenceID) and the latest token issued.
type FenceCounter struct {
	ID    string
	Token int64
}

// RowsQuerier runs a query that returns rows: a *sql.DB, *sql.Conn or
// *sql.Tx.
type RowsQuerier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Counters reads the first n counters of namespace ns, in fence id order.
// A missing table is the server's error (IsMissingTable).
func (t *FenceTable) Counters(ctx context.Context, q RowsQuerier, ns string, n int) ([]FenceCounter, error) {
	rows, err := q.QueryContext(ctx, t.read.counters, ns, n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []FenceCounter
	for rows.Next() {
		var id []byte
		var c FenceCounter
		if err := rows.Scan(&id, &c.Token); err != nil {
			return nil, err
		}
		c.ID = string(id)
		out = append(out, c)
	}
	return out, rows.Err()
}

// Token reads the latest token of the counter id in namespace ns; false
// when it has none. A missing table is the server's error
// (IsMissingTable).
func (t *FenceTable) Token(ctx context.Context, q Querier, ns, id string) (int64, bool, error) {
	var arg any = id
	if t.read.binaryID {
		arg = []byte(id)
	}
	var tok int64
	err := q.QueryRowContext(ctx, t.read.token, ns, arg).Scan(&tok)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, err
	}
	return tok, true, nil
}
