package ledger

import (
	"context"
	"strings"

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
	var n int
	var err error
	if t.pg() {
		// to_regclass resolves the quoted name through the search_path, as
		// the ledger's own statements do
		err = q.QueryRowContext(ctx, `SELECT COUNT(*) FROM pg_attribute
WHERE attrelid = to_regclass($1) AND attname = 'namespace' AND NOT attisdropped`, t.q).Scan(&n)
	} else {
		err = q.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = 'namespace'`, t.name).Scan(&n)
	}
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
	if !t.pg() {
		_, err := q.ExecContext(ctx, "ALTER TABLE "+t.q+
			" ADD COLUMN namespace VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '' FIRST,"+
			" DROP PRIMARY KEY, ADD PRIMARY KEY (namespace, job, slot)")
		if err != nil {
			return errs.Wrap(err, "ledger table %q: add the namespace column", t.name)
		}
		return nil
	}
	var pkey string
	err = q.QueryRowContext(ctx, `SELECT conname FROM pg_constraint WHERE conrelid = to_regclass($1) AND contype = 'p'`, t.q).Scan(&pkey)
	if err != nil {
		return errs.Wrap(err, "ledger table %q: find its primary key", t.name)
	}
	_, err = q.ExecContext(ctx, `ALTER TABLE `+t.q+` ADD COLUMN namespace varchar(128) NOT NULL DEFAULT '', `+
		`DROP CONSTRAINT "`+strings.ReplaceAll(pkey, `"`, `""`)+`", ADD PRIMARY KEY (namespace, job, slot)`)
	if err != nil {
		return errs.Wrap(err, "ledger table %q: add the namespace column", t.name)
	}
	return nil
}
