package lockproto

import (
	"errors"
	"math/rand/v2"

	"github.com/ormlock/ormlock/internal/errs"
)

// The prepared-statement cache: the try-once lock as a prepared statement.
//
// Parsing and planning the lock's SELECT is most of what the server spends
// on a locked transaction beyond an unlocked one (on a loopback server, as
// much as the client's whole call). So on a connection that reaches its
// backend directly, a Transaction's try-once lock is a statement prepared
// once per connection, by SQL (PREPARE, in the message of its first use),
// and run by EXECUTE in the one message with BEGIN; the message is still
// one simple-protocol query, and the server parses only the EXECUTE:
//
//	BEGIN; EXECUTE ormlock_pg_try_advisory_xact_lock_int8(-2533923874772390729)
//
// The statement is named after the function it runs, so that the server's
// log says what the message does. A connection is direct when the pid of
// its backend (pg_backend_pid(), read with the first lock taken on the
// connection) is the pid the connection announced when it started: a pooler
// in between (PgBouncer in transaction mode hands each transaction to any
// of its server connections, where a prepared statement may not exist)
// announces a pid of its own, so behind one the lock is sent as text every
// time. A prepared statement that the application dropped (DISCARD ALL,
// DEALLOCATE) is prepared again in the same call: ROLLBACK, then the
// message with PREPARE. Prepared statements outlive ROLLBACK; they are the
// connection's and end with it. The wait, Session and the split protocol's
// lock transaction keep the text message.

// pgTryStmt names the prepared try-once lock statements, for int8 keys and
// for pairs of int4; their first column is the lock's result, their second
// the transaction's isolation (read when BEGIN named no level), their third
// the connection's mark (pgConnState.mark), a literal of the statement's
// body: the library trusts an EXECUTE's answer only when it carries the
// mark, so that a statement of that name it did not prepare (the
// application's own) can never stand in for the lock. A statement that
// answers without the mark, or fails as the library's never would (other
// parameter types), is dropped and the library's prepared in its place,
// within the call.
var pgTryStmt = [2]struct{ name, prepare string }{
	{"ormlock_pg_try_advisory_xact_lock_int8",
		"PREPARE ormlock_pg_try_advisory_xact_lock_int8(int8) AS SELECT pg_try_advisory_xact_lock($1), current_setting('transaction_isolation'), "},
	{"ormlock_pg_try_advisory_xact_lock_int4",
		"PREPARE ormlock_pg_try_advisory_xact_lock_int4(int4, int4) AS SELECT pg_try_advisory_xact_lock($1, $2), current_setting('transaction_isolation'), "},
}

// pgConnStateKey is the key of a connection's pgConnState in its
// PgWire.CustomData.
const pgConnStateKey = "ormlock.session"

// pgConnState is what the protocol knows of one connection (direct or
// behind a pooler, which statements it prepared), kept with it in its
// PgWire.CustomData.
type pgConnState struct {
	known    bool             // direct was read
	direct   bool             // the connection reaches its backend without a pooler
	prepared [2]bool          // pgTryStmt[i] is prepared on the backend
	shapes   map[string]*bool // the shapes' statements by name (pgShapePrepared), prepared when true
	mark     int64            // random, written into the statements this connection prepares
}

// pgConnStateOf returns pc's pgConnState, created on first use; nil when
// the driver keeps no custom data.
func pgConnStateOf(pc PgWire) *pgConnState {
	m := pc.CustomData()
	if m == nil {
		return nil
	}
	if s, ok := m[pgConnStateKey].(*pgConnState); ok {
		return s
	}
	s := &pgConnState{mark: rand.Int64N(1<<62) + 1}
	m[pgConnStateKey] = s
	return s
}

// SQLSTATEs of the prepared statement's life: gone (26000,
// invalid_sql_statement_name) and there already (42P05,
// duplicate_prepared_statement).
const (
	sqlStateNoStatement  = "26000"
	sqlStateDupStatement = "42P05"
)

// errNotOurStatement says that the prepared lock statement's answer did not
// carry the connection's mark, and the library's statement could not be
// put in its place: the lock was not taken.
var errNotOurStatement = errors.New("the prepared lock statement is not the library's")

// lockPrepared takes o's try-once lock by the prepared statement, in the
// message that begins the transaction with begin, on the direct connection
// x.pc whose record is ps; it prepares the statement in that message first
// when it is not prepared yet, or not the library's.
func (pgAdvisory) lockPrepared(o *Op, x *lockExchange, ps *pgConnState, begin string) error {
	// direct: the backend's pid is the one the connection announced
	o.fence.pid = x.pc.PID()
	i := pgTryIndex(o.target.pg)
	return execPrepared(x, ps, &ps.prepared[i], pgTryStmt[i].name, lockLayout{iso: true, mark: true},
		func(prepare bool) string { return pgTryMessage(begin, o.target.pg, prepare, ps.mark) })
}

// execPrepared sends msg(false), the message that EXECUTEs the prepared
// statement name, when *prepared says it is prepared on x's connection, or
// msg(true), which PREPAREs it first (with ps.mark), and reads its reply as
// l says; *prepared follows. The reply is trusted only when it carries the
// connection's mark.
func execPrepared(x *lockExchange, ps *pgConnState, prepared *bool, name string, l lockLayout, msg func(prepare bool) string) error {
	// ours: the answer carries the connection's mark; otherwise, on a
	// connection still in the transaction the message began (status
	// 'T' or 'E'), the statement of that name is not the library's
	// (dropped by the application: DISCARD ALL, DEALLOCATE; or a
	// foreign one): end the transaction, which ends whatever that
	// statement took, drop it and prepare the library's
	ours := func(err error) bool { return err == nil && x.rep.mark == ps.mark }
	foreign := func() bool { return !x.pc.IsClosed() && (x.status == 'T' || x.status == 'E') }
	drop := func() bool {
		*prepared = false
		rerr := x.pc.Exec(x.ctx, "ROLLBACK; DEALLOCATE "+name).Close()
		return (rerr == nil || SQLState(rerr) == sqlStateNoStatement) && x.pc.TxStatus() == 'I'
	}
	if *prepared {
		err := x.send(msg(false), l)
		if ours(err) || !foreign() {
			return err
		}
		if !drop() {
			return errs.Join(errNotOurStatement, err)
		}
	}
	err := x.send(msg(true), l)
	if err != nil && SQLState(err) == sqlStateDupStatement && x.status == 'E' {
		// a statement of that name the record does not know (a
		// PREPARE whose answer was lost, or a foreign one)
		if !drop() {
			return err
		}
		err = x.send(msg(true), l)
	}
	if ours(err) {
		*prepared = true
		return nil
	}
	return errs.Join(errNotOurStatement, err)
}
