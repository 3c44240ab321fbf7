package gormlock

// checkServer refuses a server whose locks would be fake (a PostgreSQL
// standby, CockroachDB before v26.3, Galera, multi-primary Group
// Replication, a read-only MySQL replica), asking once per *sql.DB; see
// docs/COMPATIBILITY.md. Inside a transaction on a pinned connection, where
// GORM cannot name the pool, the check is left to the outer call.
func (c *call) checkServer() error {
	sqlDB, err := primarySQL(c.db)
	if err != nil {
		if inTx(c.db) {
			return nil
		}
		return err
	}
	return c.op.CheckServer(c.ctx, sqlDB)
}
