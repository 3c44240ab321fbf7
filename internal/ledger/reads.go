package ledger

import (
	"context"

	"github.com/ormlock/ormlock/internal/status"
)

// Runs returns the last limit rows of job in namespace ns, newest slot
// first, as the ledger holds them (Stale false: see [Table.MarkStale]).
func (t *Table) Runs(ctx context.Context, q Querier, ns, job string, limit int) ([]Row, error) {
	rs, err := t.query(ctx, q, t.sql.runsSQL(t), ns, job, limit)
	if err != nil {
		return nil, t.wrap("read runs", err)
	}
	return rs, nil
}

// query runs query, a selectRows with its WHERE, on q and reads its rows.
func (t *Table) query(ctx context.Context, q Querier, query string, args ...any) ([]Row, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		r, err := t.scanRow(rows.Scan)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// scanRow reads one row of the ledger server's selectRows (every column
// of a [Row]; MySQL DATETIME values as text in UTC, see the package doc)
// with scan (a *sql.Rows' or a *sql.Row's Scan).
func (t *Table) scanRow(scan func(dest ...any) error) (Row, error) {
	var r Row
	if err := t.sql.scanRow(scan, &r); err != nil {
		return Row{}, err
	}
	r.Slot, r.Started = r.Slot.UTC(), r.Started.UTC()
	if !r.Finished.IsZero() {
		r.Finished = r.Finished.UTC()
		r.Duration = r.Finished.Sub(r.Started)
	}
	return r, nil
}

// Row is one row of the ledger as [Table.Runs] reads it: defined once in
// internal/status, ormlock.Run is the same type.
type Row = status.Run

// RunType is the constraint of ormlock.Run: the one type.
type RunType interface{ Row }

// RunsAs returns rs as R values (ormlock.Run), with err.
func RunsAs[R RunType](rs []Row, err error) ([]R, error) {
	if rs == nil {
		return nil, err
	}
	out := make([]R, len(rs))
	for i, r := range rs {
		out[i] = R(r)
	}
	return out, err
}
