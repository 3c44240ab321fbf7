package gormlock

import "github.com/ormlock/ormlock/internal/lockproto"

// checkServer refuses a server whose locks would be fake (a PostgreSQL
// standby, CockroachDB before v26.3, Galera, multi-primary Group
// Replication, a read-only MySQL replica), asking once per *sql.DB; see
// docs/COMPATIBILITY.md. Inside a transaction the question goes through that
// transaction, not a new connection of the pool, which may have none to
// spare; where GORM cannot name the pool (a transaction on a pinned
// connection), the check is left to the outer call.
func (c *call) checkServer() error {
	sqlDB, err := primarySQL(c.db)
	if err != nil {
		if inTx(c.db) {
			return nil
		}
		return err
	}
	if inTx(c.db) {
		q, err := sqlTx(c.db)
		if err != nil {
			return err
		}
		cq, ok := q.(lockproto.CheckQuerier)
		if !ok {
			return nil
		}
		return c.op.CheckServerOn(c.ctx, sqlDB, cq)
	}
	return c.op.CheckServer(c.ctx, sqlDB)
}
