package ledger

import (
	"context"
	"database/sql"
	"errors"
)

// Jobs lists at most n job names of namespace ns after the name after, in
// order (the web view's list of jobs): a walk that reads, per job, the
// first primary key entry after the previous job (a "loose index scan",
// which neither server does by itself here), so that its cost is that of
// the n names, never the ledger's size (no DISTINCT, no GROUP BY over the
// table). On PostgreSQL the walk is one recursive query whose every step
// is an index-only scan for the first entry after the previous job,
// stopped by LIMIT 1. On MySQL/MariaDB it is one statement per job:
// MariaDB plans the recursive form's step as a scan of the namespace's
// whole index range (measured: 1.3 million index entries read for a page
// of 26 jobs on a 200,000-row ledger), and GROUP BY or DISTINCT read every
// row of each listed job; a lone step reads one index entry. q is a
// transaction or a pool on the primary.
func (t *Table) Jobs(ctx context.Context, q Querier, ns, after string, n int) ([]string, error) {
	return t.sql.jobs(ctx, t, q, ns, after, n)
}

// jobs is Table.Jobs on PostgreSQL: the one recursive query.
func (pgLedger) jobs(ctx context.Context, t *Table, q Querier, ns, after string, n int) ([]string, error) {
	rows, err := q.QueryContext(ctx, t.JobsSQL(), ns, after, n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var j string
		if err := rows.Scan(&j); err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, rows.Err()
}

// JobsSQL is the statement of Jobs (namespace, after, n): on PostgreSQL
// the whole walk, on MySQL/MariaDB one step of it (namespace, after), sent
// once per job.
func (t *Table) JobsSQL() string { return t.sql.jobsSQL(t) }

func (myLedger) jobsSQL(t *Table) string {
	return "SELECT job FROM " + t.q + " WHERE namespace = ? AND job > ? ORDER BY job LIMIT 1"
}

func (pgLedger) jobsSQL(t *Table) string {
	return `WITH RECURSIVE j(job, n) AS (
	SELECT (SELECT r.job FROM ` + t.q + ` r WHERE r.namespace = $1 AND r.job > $2 ORDER BY r.job LIMIT 1), 1
	UNION ALL
	SELECT (SELECT r.job FROM ` + t.q + ` r WHERE r.namespace = $1 AND r.job > j.job ORDER BY r.job LIMIT 1), j.n + 1
	FROM j WHERE j.job IS NOT NULL AND j.n < $3
)
SELECT job FROM j WHERE job IS NOT NULL`
}

// jobs is Table.Jobs on MySQL/MariaDB, a statement per job. The first step
// from the start (after the empty name) reads job >= ? rather than job > ?,
// since the job column's collation (utf8mb4_bin, PAD SPACE) compares a
// name of spaces only, which RunOnce refuses but a hand may write, equal
// to the empty string.
func (myLedger) jobs(ctx context.Context, t *Table, q Querier, ns, after string, n int) ([]string, error) {
	step := t.JobsSQL()
	query := step
	if after == "" {
		query = "SELECT job FROM " + t.q + " WHERE namespace = ? AND job >= ? ORDER BY job LIMIT 1"
	}
	var out []string
	for len(out) < n {
		j, err := firstString(ctx, q, query, ns, after)
		query = step
		if errors.Is(err, sql.ErrNoRows) {
			break
		}
		if err != nil {
			return nil, err
		}
		out = append(out, j)
		after = j
	}
	return out, nil
}

// firstString reads the first column of the first row of query, or
// sql.ErrNoRows when there is none.
func firstString(ctx context.Context, q Querier, query string, args ...any) (string, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return "", err
		}
		return "", sql.ErrNoRows
	}
	var s string
	if err := rows.Scan(&s); err != nil {
		return "", err
	}
	return s, rows.Close()
}
