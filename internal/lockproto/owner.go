package lockproto

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
)

// The owner of a held lock (ormlock.WithOwner), where the server can show it
// to ormlock.HolderInfo.Owner. Recording it must not cost the lock a round
// trip, so it is recorded where that is free or the verb is not a hot path,
// per server and verb:
//
//	                          PostgreSQL, PgBouncer   MySQL/MariaDB
//	Session (any shape)       application_name        no
//	Session, shared conns     application_name        no
//	RunOnce, claim mode       application_name        no (the ledger row's owner)
//	Lead                      application_name        the owners row
//	Transaction, RunOnce tx   no                      no
//	ormlock run --owner       application_name        the owners row
//	ormlock lead              application_name        the owners row
//
// "no" leaves Owner as the server shows the holder's connection otherwise:
// on PostgreSQL its own application_name (the DSN's, "" by default), on
// MySQL/MariaDB "".
//
// PostgreSQL: a Session's (and a Lead's) lock transaction sets its
// application_name to the owner with SET LOCAL, so pg_stat_activity shows
// it for as long as the lock is held, and the ROLLBACK that releases the
// lock restores the connection's own name. PostgreSQL keeps at most 63
// bytes of it (NAMEDATALEN - 1); a longer owner is cut at a character
// boundary. The statement has no arguments: it goes by the simple protocol
// and leaves no portal (hence no snapshot) open on the idle transaction. A
// shared lock connection takes the owner of the Session that opens it, with
// SET (sharedconn.go). A Transaction's lock statement does not set it: that
// would be one more statement, or one more column in each of the lock
// statements' forms (one key, a set, a semaphore; two-message, one-message
// and prepared), for a name that the DSN's application_name already gives a
// process at no cost.

// pgMaxAppName is the longest application_name PostgreSQL keeps, in bytes.
const pgMaxAppName = 63

// pgOwnerSQL is the statement that names owner as the lock transaction's
// application_name: a string literal, quoted as standard_conforming_strings
// (on since PostgreSQL 9.1) reads it.
func pgOwnerSQL(owner string) string {
	if len(owner) > pgMaxAppName {
		n := pgMaxAppName
		for n > 0 && !utf8.RuneStart(owner[n]) {
			n--
		}
		owner = owner[:n]
	}
	return "SET LOCAL application_name = '" + strings.ReplaceAll(owner, "'", "''") + "'"
}

// setOwner names o's owner on the lock transaction q (nothing without
// WithOwner).
func (pgAdvisory) setOwner(ctx context.Context, o *Op, q Querier) error {
	if o.Cfg.Owner == "" {
		return nil
	}
	if _, err := q.ExecContext(ctx, pgOwnerSQL(o.Cfg.Owner)); err != nil {
		return errs.Wrap(err, "set application_name to the owner")
	}
	return nil
}

// MySQL/MariaDB: PROCESSLIST carries no column a client can set, so a Lead
// with WithOwner, once elected, writes a row naming itself in the owners
// table (the ledger table's name + OwnersTableSuffix, created on first use),
// one per lock it holds:
//
//	REPLACE INTO t (lock_name, owner, conn_id, since) VALUES (?, ?, CONNECTION_ID(), NOW(6))
//
// in a transaction of its own on the lock connection (so it is committed
// whatever the session's autocommit): three round trips per term. A row
// names the connection that wrote it, so the holder lookup reads it only
// for the connection that holds the lock now; a deposed leader's row is
// simply overwritten by the next. The row is best effort: a server that
// refuses it (no CREATE or INSERT privilege) leaves Owner empty and the
// lock as it is. ormlock run --owner has its Sessions write it too
// (config.OwnerRow: a command that starts a process can spend three round
// trips). Library Sessions and Transactions do not: three round trips and a
// write on every lock, and their WithOwner may be the ledger's owner, set
// as a default, which must not create a table.
//
// Nothing cheaper names the holder on the servers' defaults: a companion
// GET_LOCK named after the owner (in the lock's own statement) can be found
// only by listing a connection's locks, which needs MariaDB's
// metadata_lock_info plugin or MySQL's performance_schema.metadata_locks;
// connection attributes (performance_schema.session_connect_attrs) are set
// per connection, at connect, not per lock, and MariaDB's
// performance_schema is off by default; a user variable is private to its
// connection.

// OwnersTableSuffix is appended to the ledger table's name to name the
// MySQL/MariaDB owners table.
const OwnersTableSuffix = "_owners"

func mysqlOwnersTable(ledger string) string { return "`" + ledger + OwnersTableSuffix + "`" }

// recordOwner writes the owner rows of a lock that names its owner
// (Holding.Owner: a Lead's term), or of a Session with config.OwnerRow,
// on its lock connection conn, one per lock it holds (a set's keys, a
// semaphore's slot), creating the table when it is missing; errors are
// ignored (see above).
func (mysqlNamed) recordOwner(ctx context.Context, o *Op, conn *sql.Conn) {
	if o.Cfg.Owner == "" || (!o.hold.Owner && !o.Cfg.OwnerRow) || validIdent(o.Cfg.LedgerTable+OwnersTableSuffix) != nil {
		return
	}
	t := mysqlOwnersTable(o.Cfg.LedgerTable)
	query, args := "REPLACE INTO "+t+" (lock_name, owner, conn_id, since) VALUES ", []any(nil)
	for i, name := range o.held.names(o.target) {
		if i > 0 {
			query += ", "
		}
		query += "(?, ?, CONNECTION_ID(), NOW(6))"
		args = append(args, name, o.Cfg.Owner)
	}
	write := func() error {
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, query, args...); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	}
	err := write()
	if isMySQLErrno(err, 1146) {
		if _, err = conn.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+t+` (
	lock_name VARBINARY(192) NOT NULL PRIMARY KEY,
	owner     VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
	conn_id   BIGINT UNSIGNED NOT NULL,
	since     DATETIME(6) NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`); err == nil {
			err = write()
		}
	}
	o.ownerRows = err == nil
}

// forgetOwner deletes the owner rows o wrote (mysqlNamed.recordOwner), as
// its locks are released on q, their connection, so that a later holder of
// the same lock on the same connection (a pooled or shared connection, an
// id the server reuses) that writes no row is not shown with this owner.
// It runs before RELEASE_LOCK, while the lock is still this connection's,
// and commits whatever the session's autocommit (DELETE, then COMMIT: two
// round trips, spent only by the verbs that wrote a row). Errors are
// ignored, as the write's are: the row names this connection, and the next
// writer overwrites it.
func (mysqlNamed) forgetOwner(ctx context.Context, o *Op, q Querier) {
	if !o.ownerRows {
		return
	}
	o.ownerRows = false
	names := o.held.names(o.target)
	query, args := "DELETE FROM "+mysqlOwnersTable(o.Cfg.LedgerTable)+" WHERE conn_id = CONNECTION_ID() AND lock_name IN (", make([]any, len(names))
	for i, name := range names {
		if i > 0 {
			query += ", "
		}
		query += "?"
		args[i] = name
	}
	if _, err := q.ExecContext(ctx, query+")", args...); err == nil {
		_, _ = q.ExecContext(ctx, "COMMIT")
	}
}

// names are the GET_LOCK names held of t: a shape's items taken (h), else
// its one key's.
func (h heldItems) names(t Target) []string {
	if len(h) == 0 {
		return []string{t.mysql}
	}
	names := make([]string, len(h))
	for i, it := range h {
		names[i] = it.mysql
	}
	return names
}

// mysqlOwner reads the owner row of the lock's holder, connection id, in
// the owners table of o's ledger table; "" when there is none (no row, no
// table) or the server refuses to show it (no database selected, no
// privilege on the table): the owner is best effort, as its write is, and
// must not cost Holder the answer it could give. Only an error of the
// connection itself is returned.
func mysqlOwner(ctx context.Context, o *Op, q Querier, id int64) (string, error) {
	return mysqlOwnerOf(ctx, o, q, o.target.mysql, id)
}

// mysqlOwnerOf is mysqlOwner for the lock name.
func mysqlOwnerOf(ctx context.Context, o *Op, q Querier, name string, id int64) (string, error) {
	if validIdent(o.Cfg.LedgerTable+OwnersTableSuffix) != nil {
		return "", nil
	}
	var owner string
	err := q.QueryRowContext(ctx, "SELECT owner FROM "+mysqlOwnersTable(o.Cfg.LedgerTable)+" WHERE lock_name = ? AND conn_id = ?", name, id).Scan(&owner)
	switch {
	case err == nil:
		return owner, nil
	case errors.Is(err, sql.ErrNoRows), MySQLErrno(err) != 0:
		return "", nil
	}
	return "", errs.Wrap(err, "read the lock's owner row")
}

func validIdent(s string) error {
	return config.ValidIdentifier("table", s)
}
