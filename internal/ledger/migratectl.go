package ledger

import (
	"context"
	"database/sql"

	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/schema"
)

// Migrate's part for the operators' controls, under its lock: the
// controls table and the actions log (none when their names do not fit,
// schema.ControlsTable), and the ledger's status CHECK widened in place to
// schema.StatusList where a table of an earlier version has the narrower
// one ('running', 'done', 'failed'): the constraint keeps its name, and
// every row of the table already passes the new one.

// migrateControls creates t's controls table and actions log and widens
// its status CHECK.
func (c Ctl) migrateControls(ctx context.Context, q lockproto.Querier) error {
	if err := c.createControls(ctx, q); err != nil {
		return err
	}
	return c.widenStatus(ctx, q)
}

// createControls creates t's controls table and actions log on q.
func (c Ctl) createControls(ctx context.Context, q lockproto.Querier) error {
	t := c.t
	for _, stmt := range lockproto.PerServer(t.s, schema.Postgres, schema.MySQL).ControlStatements(t.name) {
		if _, err := q.ExecContext(ctx, stmt); err != nil {
			return errs.Wrap(err, "ledger table %q: create the controls table and the actions log", t.name)
		}
	}
	return nil
}

// widenStatus replaces each CHECK constraint of t that tests status
// without 'skipped' by schema.StatusList's, under the same name.
func (c Ctl) widenStatus(ctx context.Context, q lockproto.Querier) error {
	t := c.t
	query, arg := t.ctl.narrowChecksSQL(t)
	rows, err := queryAll(ctx, q, query, arg)
	if err != nil {
		return errs.Wrap(err, "ledger table %q: find its status CHECK", t.name)
	}
	for _, name := range rows {
		for _, stmt := range t.ctl.widenCheckSQL(t, name) {
			if _, err := q.ExecContext(ctx, stmt); err != nil {
				return errs.Wrap(err, "ledger table %q: widen its status CHECK %q to %s", t.name, name, schema.StatusList)
			}
		}
	}
	return nil
}

// queryAll reads the one text column of query's rows on q (a Querier
// that can list rows, as *sql.Tx and *sql.Conn can).
func queryAll(ctx context.Context, q lockproto.Querier, query string, args ...any) ([]string, error) {
	lq, ok := q.(interface {
		QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	})
	if !ok {
		var s string
		err := q.QueryRowContext(ctx, query, args...).Scan(&s)
		if err == sql.ErrNoRows {
			return nil, nil
		}
		return []string{s}, err
	}
	rows, err := lq.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
