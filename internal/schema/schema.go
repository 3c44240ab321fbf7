// Package schema is the DDL of the tables ormlock's Migrate creates (the
// RunOnce ledger, the fencing counters, the operators' controls and
// actions log, the leases) on each family of
// servers, in one place that both the protocol (internal/lockproto,
// internal/ledger) and the root's ormlock.MigrateSQL read: it imports no
// protocol code, so the root can print the statements without linking the
// protocol.
package schema

import (
	"fmt"
	"hash/fnv"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
)

// FenceSuffix is appended to the ledger table's name to name the fence
// table.
const FenceSuffix = "_fence"

// ControlsSuffix and ActionsSuffix are appended to the ledger table's
// name to name the operators' controls table and actions log
// (docs/OPERATIONS.md); a ledger whose name is too long for them has
// neither, and the operators' actions are refused.
const (
	ControlsSuffix = "_controls"
	ActionsSuffix  = "_actions"
)

// StatusList is the ledger's status CHECK list: every status a row may
// hold ('skipped' and 'rerun' are the operators', docs/OPERATIONS.md).
const StatusList = "('running', 'done', 'failed', 'skipped', 'rerun')"

// ControlsTable and ActionsTable return the names of the controls table
// and the actions log of ledger, and whether they fit an identifier
// (63 bytes).
func ControlsTable(ledger string) (string, bool) {
	return ledger + ControlsSuffix, config.ValidIdentifier("", ledger+ControlsSuffix) == nil
}

// ActionsTable: see ControlsTable.
func ActionsTable(ledger string) (string, bool) {
	return ledger + ActionsSuffix, config.ValidIdentifier("", ledger+ActionsSuffix) == nil
}

// ActionsIndexName is the name of the actions log's index on (namespace,
// name, id).
func ActionsIndexName(ledger string) string { return indexName(ledger+ActionsSuffix, "_ns_name") }

// Family is the DDL of one family of servers.
type Family struct {
	// Quote quotes a validated plain identifier.
	Quote func(ident string) string
	// Ledger is the ledger table q's CREATE TABLE IF NOT EXISTS; ix is
	// its quoted index name, which MySQL/MariaDB declare in it.
	Ledger func(q, ix string) string
	// LedgerIndex is the ledger's index as a statement of its own (CREATE
	// INDEX IF NOT EXISTS), "" where Ledger declares it.
	LedgerIndex func(q, ix string) string
	// Fence is the fence table q's CREATE TABLE IF NOT EXISTS.
	Fence func(q string) string
	// Controls is the controls table q's CREATE TABLE IF NOT EXISTS.
	Controls func(q string) string
	// Actions is the actions log q's CREATE TABLE IF NOT EXISTS (ix its
	// quoted index name, which MySQL/MariaDB declare in it);
	// ActionsIndex its index as a statement of its own, "" where Actions
	// declares it.
	Actions      func(q, ix string) string
	ActionsIndex func(q, ix string) string
	// Lease is the lease table q's CREATE TABLE IF NOT EXISTS.
	Lease func(q string) string
}

// Families are the DDL of each family, by the name Dialect.String gives.
var Families = map[string]Family{"postgres": Postgres, "mysql": MySQL}

// Statements returns every CREATE statement of family f for the ledger
// table ledger and the lease table lease: the ledger (and its index where
// it is a statement of its own), the fence table (none when the ledger's
// name is too long for FenceSuffix, as Migrate creates none), the leases.
// An invalid name is an error wrapping errs.ErrInvalidArgument.
func (f Family) Statements(ledger, lease string) ([]string, error) {
	if err := config.ValidIdentifier("ledger table name", ledger); err != nil {
		return nil, err
	}
	if err := config.ValidIdentifier("lease table name", lease); err != nil {
		return nil, err
	}
	q, ix := f.Quote(ledger), f.Quote(IndexName(ledger))
	out := []string{f.Ledger(q, ix)}
	if s := f.LedgerIndex(q, ix); s != "" {
		out = append(out, s)
	}
	if config.ValidIdentifier("", ledger+FenceSuffix) == nil {
		out = append(out, f.Fence(f.Quote(ledger+FenceSuffix)))
	}
	out = append(out, f.ControlStatements(ledger)...)
	return append(out, f.Lease(f.Quote(lease))), nil
}

// ControlStatements returns the CREATE statements of the controls table
// and the actions log of ledger (and the log's index where it is a
// statement of its own); none when their names do not fit.
func (f Family) ControlStatements(ledger string) []string {
	var out []string
	if c, ok := ControlsTable(ledger); ok {
		out = append(out, f.Controls(f.Quote(c)))
	}
	if a, ok := ActionsTable(ledger); ok {
		q, ix := f.Quote(a), f.Quote(ActionsIndexName(ledger))
		out = append(out, f.Actions(q, ix))
		if s := f.ActionsIndex(q, ix); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// indexSuffix ends the ledger's index name.
const indexSuffix = "_ns_slot"

// maxIdentBytes is PostgreSQL's identifier limit (NAMEDATALEN-1); MySQL's
// is 64.
const maxIdentBytes = 63

// IndexName returns the name of the ledger table's index on (namespace,
// slot): the table's name with "_ns_slot", or, when that would pass 63
// bytes, the first 46 bytes of the table's name, "_", 8 hex digits of a
// hash of the whole name and "_ns_slot" (so two long names that share
// their first 46 bytes still get distinct names; PostgreSQL's index names
// are unique per schema, not per table).
func IndexName(table string) string { return indexName(table, indexSuffix) }

// indexName is IndexName with another suffix.
func indexName(table, suffix string) string {
	if len(table)+len(suffix) <= maxIdentBytes {
		return table + suffix
	}
	h := fnv.New32a()
	h.Write([]byte(table))
	tag := fmt.Sprintf("_%08x", h.Sum32())
	return table[:maxIdentBytes-len(tag)-len(suffix)] + tag + suffix
}

// ErrUnknown builds the error of an unknown family name.
func ErrUnknown(what, name string) error {
	return fmt.Errorf("%w: %s: dialect %q is not \"postgres\" or \"mysql\"", errs.ErrInvalidArgument, what, name)
}
