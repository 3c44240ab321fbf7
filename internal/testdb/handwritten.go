package testdb

import (
	"context"
	"database/sql"

	"github.com/ormlock/ormlock/keyhash"
)

// Handwritten is the lock protocol as a careful user would write it with
// database/sql alone, on the pool db of kind k: on PostgreSQL BEGIN, then
// pg_try_advisory_xact_lock on name, then COMMIT (three round trips); on
// MySQL/MariaDB GET_LOCK(name, 0) on a dedicated connection, an empty
// transaction, then RELEASE_LOCK. A lock held elsewhere is not an error:
// the call just does not commit. The benchmarks and the round-trip tests
// compare the adapters with it.
func Handwritten(ctx context.Context, k Kind, db *sql.DB, name string) error {
	if k.Dialect() == "postgres" {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		var ok bool
		if err := tx.QueryRowContext(ctx, "SELECT pg_try_advisory_xact_lock($1)", keyhash.Int64(name)).Scan(&ok); err != nil || !ok {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	lockName := keyhash.MySQLName("", name)
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", lockName).Scan(&got); err != nil || got.Int64 != 1 {
		return err
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	err = tx.Commit()
	var rel sql.NullInt64
	if rerr := conn.QueryRowContext(context.WithoutCancel(ctx), "SELECT RELEASE_LOCK(?)", lockName).Scan(&rel); rerr != nil {
		return rerr
	}
	return err
}
