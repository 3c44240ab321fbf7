package ormlock

import (
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/schema"
)

// MigrateSQL returns the CREATE statements of every table the adapters'
// Migrate creates, for teams that run their own migrations: the RunOnce
// ledger (and, on PostgreSQL, its index on (namespace, slot), a statement
// of its own), the fencing counters, the operators' controls table and
// actions log ([Pause], docs/OPERATIONS.md) and the leases ([WithLease]),
// each IF NOT EXISTS, with the names opts set ([WithLedgerTable],
// [WithLeaseTable]; other options are ignored). dialect is "postgres" or
// "mysql" (MySQL and MariaDB); any other is an error wrapping
// [ErrInvalidArgument], as is an invalid option. Migrate also upgrades a
// ledger table of an earlier shape (the namespace column, the index, the
// status CHECK widened to 'skipped' and 'rerun'), which these statements
// do not; see
// docs/PROTOCOL.md (The ledger: Migrate, Runs, Prune).
func MigrateSQL(dialect string, opts ...Option) ([]string, error) {
	cfg := config.New(opts...)
	if err := cfg.Err(); err != nil {
		return nil, err
	}
	f, ok := schema.Families[dialect]
	if !ok {
		return nil, schema.ErrUnknown("MigrateSQL", dialect)
	}
	return f.Statements(cfg.LedgerTable, cfg.LeaseTableName())
}
