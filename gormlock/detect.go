package gormlock

import (
	"database/sql"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock/internal/lockproto"
)

// checkServer refuses a server whose locks would be fake (a PostgreSQL
// standby, CockroachDB before v26.3, Galera, multi-primary Group
// Replication, a read-only MySQL replica), asking once per *sql.DB; see
// docs/COMPATIBILITY.md.
func (c *call) checkServer() error {
	return serverCheck(c.db, func(sqlDB *sql.DB, q lockproto.CheckQuerier) error {
		return c.op.CheckServerOn(c.ctx, sqlDB, q)
	})
}

// checkPool is checkServer for the verbs that build no Op (Runs, Prune),
// on db of dialect d; a context that has ended returns its error first,
// sending nothing.
func checkPool(db *gorm.DB, d lockproto.Dialect) error {
	ctx := ctxOf(db)
	if err := lockproto.Ended(ctx); err != nil {
		return err
	}
	return serverCheck(db, func(sqlDB *sql.DB, q lockproto.CheckQuerier) error {
		return lockproto.CheckPool(ctx, d, sqlDB, q)
	})
}

// serverCheck runs check on db's primary pool. Inside a transaction the
// question goes through that transaction, not a new connection of the
// pool, which may have none to spare; where GORM cannot name the pool (a
// transaction on a pinned connection), the check is left to the outer
// call.
func serverCheck(db *gorm.DB, check func(sqlDB *sql.DB, q lockproto.CheckQuerier) error) error {
	sqlDB, err := primarySQL(db)
	if err != nil {
		if inTx(db) {
			return nil
		}
		return err
	}
	if inTx(db) {
		q, err := sqlTx(db)
		if err != nil {
			return err
		}
		cq, ok := q.(lockproto.CheckQuerier)
		if !ok {
			return nil
		}
		return check(sqlDB, cq)
	}
	return check(sqlDB, sqlDB)
}
