// Package pgxdriver is the protocol's pgx driver: everything of the lock
// protocol that is pgx's own, behind the interfaces internal/lockproto
// declares (lockproto's pgdriver.go), so that the protocol and the verb
// core import no pgx:
//
//   - the wire (lockproto.PgWire) of a pgx connection, on which the lock
//     travels in one message with BEGIN and a OneMessageTx ends: pgconn's
//     simple protocol, whether the connection is pinned through pgx's
//     database/sql driver (stdlib, reached inside (*sql.Conn).Raw) or
//     from a *pgxpool.Pool (this file);
//   - the pool-native lock connection of pgxlock (Pool: acquire, release,
//     destroy a *pgxpool.Conn), and the pgx connection under a locked
//     transaction that pgxlock hands fn (TxConn, ConnOf; pool.go);
//   - the multiplexer probe of the server check (probe.go);
//   - the classification of pgx's errors: a session-ending severity
//     (*pgconn.PgError), a COMMIT answered with ROLLBACK
//     (pgx.ErrTxCommitRollback). The SQLSTATE and "never sent" are read
//     through interfaces pgx's errors implement (SQLState, SafeToRetry),
//     which need no driver.
//
// Linking the package registers it (lockproto.RegisterPgDriver):
// internal/verbs imports it, so every adapter drives pgx connections
// alike. The protocol's own statements stay in lockproto as SQL, among
// them Session's, whose keepalive, a statement without arguments, goes by
// the simple protocol on either kind of connection and so clears the
// backend_xmin the lock's portal would pin.
package pgxdriver

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ormlock/ormlock/internal/lockproto"
)

func init() { lockproto.RegisterPgDriver(driver{}) }

// conner is what a pgx connection under database/sql exposes: pgx's
// *stdlib.Conn, and pgxlock's view of the caller's pgx.Tx.
type conner interface{ Conn() *pgx.Conn }

// driver is pgx's lockproto.PgDriver.
type driver struct{}

func (driver) Wire(dc any) (lockproto.PgWire, bool) {
	c, ok := dc.(conner)
	if !ok {
		return nil, false
	}
	return wire{c.Conn().PgConn()}, true
}

// SessionEnded reports whether err is a *pgconn.PgError of severity FATAL
// or PANIC (the unlocalized severity, else the localized one).
func (driver) SessionEnded(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	sev := pe.SeverityUnlocalized
	if sev == "" {
		sev = pe.Severity
	}
	return sev == "FATAL" || sev == "PANIC"
}

func (driver) ErrCommitRollback() error { return pgx.ErrTxCommitRollback }

// wire is a pgconn connection as a lockproto.PgWire: pgconn's own methods
// of that interface (a named field, not an embedded one, so that wire has
// only these), Exec's reply wrapped. A struct of one pointer, stored in an
// interface without an allocation.
type wire struct{ c *pgconn.PgConn }

func (w wire) Exec(ctx context.Context, query string) lockproto.PgReply {
	return reply{w.c.Exec(ctx, query)}
}

func (w wire) TxStatus() byte                          { return w.c.TxStatus() }
func (w wire) IsClosed() bool                          { return w.c.IsClosed() }
func (w wire) PID() uint32                             { return w.c.PID() }
func (w wire) CustomData() map[string]any              { return w.c.CustomData() }
func (w wire) CancelRequest(ctx context.Context) error { return w.c.CancelRequest(ctx) }

// reply is pgconn's reader of one message's results as a
// lockproto.PgReply (pgconn reuses it per connection: nothing is
// allocated).
type reply struct{ *pgconn.MultiResultReader }

func (r reply) NextRow() bool    { return r.ResultReader().NextRow() }
func (r reply) Values() [][]byte { return r.ResultReader().Values() }
func (r reply) CloseResult() (string, error) {
	tag, err := r.ResultReader().Close()
	return tag.String(), err
}
