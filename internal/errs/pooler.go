package errs

import (
	"errors"
	"strings"
)

// Prepared statements behind a transaction-mode pooler.
//
// pgx's default exec mode (cache_statement; cache_describe and describe_exec
// likewise) prepares named or unnamed statements on a server connection and
// uses them later. A pooler in transaction mode (PgBouncer before 1.21, or
// 1.21+ without max_prepared_statements) hands each transaction, and each
// autocommitted statement, to whichever server connection is free, so a
// statement prepared by one client is found by another ("prepared statement
// "stmtcache_..." already exists", SQLSTATE 42P05) or missing where it was
// prepared ("... does not exist", 26000). Neither is a lock failure; the fix
// is the DSN's. Wrap and Mark append PoolerHint to such an error once.

// PoolerHint is what an error of a prepared statement clash adds: its
// likely cause and the fix.
const PoolerHint = "a transaction-mode pooler (PgBouncer before 1.21, or without max_prepared_statements) " +
	"passed pgx's prepared statements between server connections: add default_query_exec_mode=simple_protocol " +
	"(or exec) to the DSN (pgx.ConnConfig.DefaultQueryExecMode), or run PgBouncer 1.21+ with max_prepared_statements"

// PreparedClash reports whether err is PostgreSQL's prepared statement
// already existing (42P05) or missing (26000), which behind a pooler in
// transaction mode means statements prepared on one server connection and
// used on another.
func PreparedClash(err error) bool {
	var s interface{ SQLState() string }
	if !errors.As(err, &s) {
		return false
	}
	switch s.SQLState() {
	case "42P05", "26000":
		return strings.Contains(err.Error(), "prepared statement")
	}
	return false
}

// pooler is an error with PoolerHint after its text.
type pooler struct{ err error }

func (p *pooler) Error() string { return p.err.Error() + " (" + PoolerHint + ")" }
func (p *pooler) Unwrap() error { return p.err }

// hinted returns err with PoolerHint when it is a PreparedClash that has
// none yet.
func hinted(err error) error {
	var p *pooler
	if err == nil || errors.As(err, &p) || !PreparedClash(err) {
		return err
	}
	return &pooler{err}
}
