package lockproto

import (
	"database/sql"
	"errors"

	"github.com/jackc/pgx/v5"
)

// PgxConnOf returns the pgx connection under conn, a connection of pgx's
// database/sql driver pinned by the caller, which stays valid while conn is
// pinned; an error when conn is not one.
func PgxConnOf(conn *sql.Conn) (*pgx.Conn, error) {
	var pc *pgx.Conn
	err := conn.Raw(func(dc any) error {
		c, ok := dc.(pgxConner)
		if !ok {
			return errNoOneMessage
		}
		pc = c.Conn()
		return nil
	})
	return pc, err
}

// PgxConn returns the pgx connection the transaction runs on, for an
// adapter that hands fn pgx's own API on it (pgxlock): the connection of a
// *OneMessageTx or of the pinned connection under a *sql.Tx. A transaction whose
// connection the protocol does not hold (the split protocol's, begun by
// db.BeginTx or Op.SplitTx) gives an error: the adapter knows it itself.
func (t *LockedTx) PgxConn() (*pgx.Conn, error) {
	switch {
	case t.conn != nil:
		return PgxConnOf(t.conn)
	case t.Tx != nil:
		if ct, ok := t.Tx.(*OneMessageTx); ok {
			if pc := pgxConnOfPin(ct.pin); pc != nil {
				return pc, nil
			}
			return PgxConnOf(ct.conn)
		}
	}
	return nil, errors.New("ormlock: the transaction's connection is not held by the protocol")
}
