package ledger

import (
	"context"

	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/lockproto"
)

// Upgrading a ledger table created before the namespace column existed
// (primary key (job, slot)): Migrate calls upgrade after CREATE TABLE IF NOT
// EXISTS, under the same lock, so it runs once however many replicas start
// together. It adds the column with default '' (every existing row keeps its
// job, slot and status, in the empty namespace) and makes the primary key
// (namespace, job, slot). A table that has the column is left alone.
// Then it adds the index on (namespace, slot) if the table has none
// (index.go).
//
// PostgreSQL: the ALTER TABLEs run in Migrate's transaction, so a failure
// leaves the table as it was. MySQL/MariaDB: one ALTER TABLE, which InnoDB
// applies as a whole or not at all.

// hasNamespace reports whether the table has the namespace column.
func (t *Table) hasNamespace(ctx context.Context, q lockproto.Querier) (bool, error) {
	query, arg := t.sql.hasNamespaceSQL(t)
	var n int
	err := q.QueryRowContext(ctx, query, arg).Scan(&n)
	if err != nil {
		return false, errs.Wrap(err, "ledger table %q: look for the namespace column", t.name)
	}
	return n > 0, nil
}

// upgrade brings a table of an earlier shape to the current one, in order:
// the namespace column (see above), then the index on (namespace, slot)
// (index.go), which tables created before it existed lack.
func (t *Table) upgrade(ctx context.Context, q lockproto.Querier) error {
	if err := t.upgradeNamespace(ctx, q); err != nil {
		return err
	}
	return t.ensureIndex(ctx, q)
}

// upgradeNamespace adds the namespace column to a table of the earliest
// shape (see above).
func (t *Table) upgradeNamespace(ctx context.Context, q lockproto.Querier) error {
	ok, err := t.hasNamespace(ctx, q)
	if err != nil || ok {
		return err
	}
	return t.sql.addNamespace(ctx, t, q)
}
