package lockproto

import (
	"context"
	"database/sql"
	"time"
)

// Prune deletes the lease rows, of every namespace, whose lease expired
// more than olderThan ago by the server's clock, in batches of at most
// batch rows (each its own statement), and returns how many it deleted; a
// missing table is no error (nothing to prune). The namespaces' high-water
// marks (lock_key ”) are kept.
//
// A key's epochs do not restart once its row is gone: every grant raised
// the key's fencing counter (the fence table, leasefence.go) to its epoch
// before its holder was told of it, and a new grant's epoch is drawn above
// that counter, for an exclusive lease, a semaphore's slot and a shared
// lease's key row alike. (A grant whose raise failed was given back before
// anyone used its epoch.) A prune racing an acquire of the same key is
// serialised by the row's lock: the acquire that took the row over first
// made it live, and the delete, which checks the expiry again on the row it
// locked, leaves it; a delete first makes the acquire insert a new row,
// above the counter.
func (t *LeaseTable) Prune(ctx context.Context, db *sql.DB, olderThan time.Duration, batch int) (int64, error) {
	q := PerServer(t.s,
		`DELETE FROM `+t.q+` WHERE lock_key <> '' AND expires_at < clock_timestamp() - $1::bigint * interval '1 microsecond'
	AND (namespace, lock_key, reader) IN (SELECT namespace, lock_key, reader FROM `+t.q+`
		WHERE lock_key <> '' AND expires_at < clock_timestamp() - $1::bigint * interval '1 microsecond' LIMIT $2)`,
		`DELETE FROM `+t.q+` WHERE lock_key <> '' AND expires_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND LIMIT ?`)
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		res, err := db.ExecContext(ctx, q, olderThan.Microseconds(), batch)
		var n int64
		if err == nil {
			n, err = res.RowsAffected()
		}
		total += n
		switch {
		case err != nil && t.s.MissingTable(err):
			return total, nil
		case err != nil:
			return total, t.wrap("prune", err)
		case n < int64(batch):
			return total, nil
		}
	}
}
