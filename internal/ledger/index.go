package ledger

import (
	"context"

	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/schema"
)

// The prune index: a btree index on (namespace, slot), which serves Prune's
// predicate (namespace = ? AND slot < ? AND status <> 'running'), so that a
// batch reads the rows it deletes instead of the whole namespace (the
// primary key (namespace, job, slot) orders a namespace's rows by job
// first). On MySQL/MariaDB CreateSQL declares it as a KEY; on PostgreSQL,
// and on tables created before it existed, Migrate adds it (ensureIndex),
// under Migrate's lock, after checking that no index with those leading
// columns is there: an index that exists is never touched again, and
// Migrate then takes no lock on the table beyond what CREATE TABLE IF NOT
// EXISTS takes.

// IndexName returns the name of the prune index (schema.IndexName): the
// table's name with "_ns_slot", shortened with a hash of the whole name
// when that would pass 63 bytes.
func (t *Table) IndexName() string { return schema.IndexName(t.name) }

// hasIndex reports whether the table has a usable btree index whose
// leading columns are (namespace, slot), whatever its name (one added by
// hand serves as well).
func (t *Table) hasIndex(ctx context.Context, q lockproto.Querier) (bool, error) {
	query, arg := t.sql.hasIndexSQL(t)
	var n int
	err := q.QueryRowContext(ctx, query, arg).Scan(&n)
	if err != nil {
		return false, errs.Wrap(err, "ledger table %q: look for the index on (namespace, slot)", t.name)
	}
	return n > 0, nil
}

// ensureIndex adds the prune index when the table has none (see above).
// The caller holds Migrate's lock, so no other Migrate of this version adds
// it at the same time; the statement is a plain CREATE INDEX (ADD INDEX),
// not IF NOT EXISTS, so that a name already taken by another relation is an
// error that names it rather than a table left without its index.
//
// Building it on a big table takes a while: PostgreSQL's CREATE INDEX
// blocks writes to the table until it commits (and waits for the
// transactions writing to it), InnoDB's ADD INDEX lets reads and writes go
// on while it builds.
func (t *Table) ensureIndex(ctx context.Context, q lockproto.Querier) error {
	ok, err := t.hasIndex(ctx, q)
	if err != nil || ok {
		return err
	}
	if _, err := q.ExecContext(ctx, t.sql.addIndexSQL(t)); err != nil {
		return errs.Wrap(err, "ledger table %q: add the index %q on (namespace, slot)", t.name, t.IndexName())
	}
	return nil
}
