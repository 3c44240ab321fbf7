package ledger

import (
	"context"
	"database/sql"
	"time"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/schema"
)

// Table is the ledger table of one dialect.
type Table struct {
	d    lockproto.Dialect
	s    lockproto.Server
	sql  ledgerServer // the table's SQL on s (postgres.go, mysql.go)
	ctl  ctlServer    // the controls' SQL on s (ctlpostgres.go, ctlmysql.go)
	name string
	q    string // quoted name
	// cq and aq are the quoted names of the controls table and the actions
	// log, "" when their names do not fit (schema.ControlsTable)
	cq, aq string
}

// NewTable validates name (config.ValidIdentifier) for dialect d.
func NewTable(d lockproto.Dialect, name string) (*Table, error) {
	if err := config.ValidIdentifier("ledger table name", name); err != nil {
		return nil, err
	}
	s, err := lockproto.ServerOf(d)
	if err != nil {
		return nil, err
	}
	t := &Table{d: d, s: s, sql: lockproto.PerServer[ledgerServer](s, pgLedger{}, myLedger{}),
		ctl: lockproto.PerServer[ctlServer](s, pgCtl{}, myCtl{}), name: name, q: s.Quote(name)}
	if c, ok := schema.ControlsTable(name); ok {
		t.cq = s.Quote(c)
	}
	if a, ok := schema.ActionsTable(name); ok {
		t.aq = s.Quote(a)
	}
	return t, nil
}

// Name returns the table's (unquoted) name.
func (t *Table) Name() string { return t.name }

// CreateSQL returns the CREATE TABLE IF NOT EXISTS statement. On
// MySQL/MariaDB it declares the index on (namespace, slot); on PostgreSQL,
// where an index is a statement of its own, Migrate adds it (ensureIndex).
func (t *Table) CreateSQL() string { return t.sql.createSQL(t) }

// Create runs CreateSQL on q.
func (t *Table) Create(ctx context.Context, q lockproto.Querier) error {
	if _, err := q.ExecContext(ctx, t.CreateSQL()); err != nil {
		return errs.Wrap(err, "create ledger table %q", t.name)
	}
	return nil
}

// Migrate creates the ledger table op.Cfg.LedgerTable on db if it does not
// exist, while holding op's lock (made with MigrateKey and a wait), so that
// replicas starting together do not race: on PostgreSQL the lock and the
// CREATE share one transaction; on MySQL/MariaDB the lock is taken on the
// pinned connection that runs the CREATE (DDL commits implicitly there).
func Migrate(ctx context.Context, db *sql.DB, op *lockproto.Op) error {
	t, err := NewTable(op.Dialect, op.Cfg.LedgerTable)
	if err != nil {
		return err
	}
	return t.sql.migrate(ctx, db, op, t)
}

// slotArg is the slot (or another time of the row) as a statement
// argument.
func (t *Table) slotArg(slot time.Time) any { return t.sql.timeArg(slot) }

// wrap annotates a ledger statement's error, with a hint when the table is
// missing.
func (t *Table) wrap(what string, err error) error {
	if t.s.MissingTable(err) {
		return errs.Wrap(err, "ledger table %q does not exist (create it with Migrate): %s", t.name, what)
	}
	if t.s.MissingColumn(err) {
		return errs.Wrap(err, "ledger table %q has an earlier shape (upgrade it with Migrate, which adds the namespace column): %s", t.name, what)
	}
	return errs.Wrap(err, "ledger table %q: %s", t.name, what)
}
