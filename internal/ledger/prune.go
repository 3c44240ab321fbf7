package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
)

// PruneBatch is the most rows one pruning statement deletes.
const PruneBatch = 1000

// CheckCatchUp refuses a pruning window shorter than the catch-up window
// configured with it (ormlock.WithCatchUp among the same options or
// defaults) plus PruneMargin: it would delete the 'done' rows that tell
// the catch-up a slot ran, and the slot would run again. Both windows are
// judged by the database server's clock (clock.go), so the margin is not
// for the replicas' clocks: it covers a catch-up's claim coming a little
// after the read that chose its slot.
func CheckCatchUp(verb string, olderThan time.Duration, cfg config.Config) error {
	if cfg.CatchUpWindow > 0 && olderThan < cfg.CatchUpWindow+PruneMargin {
		return fmt.Errorf("%w: %s: olderThan %v is shorter than the catch-up window %v (ormlock.WithCatchUp) plus a margin of %v: "+
			"the rows it deletes tell the catch-up which slots ran, so those slots would run again; prune at least %v",
			errs.ErrInvalidArgument, verb, olderThan, cfg.CatchUpWindow, PruneMargin, cfg.CatchUpWindow+PruneMargin)
	}
	return nil
}

// PruneOlderThan is Prune with its cutoff olderThan before the database
// server's clock, read first (ServerNow): the clock that catch-up judges
// its window by, so that no pruner's clock can cut into a catch-up window.
func (t *Table) PruneOlderThan(ctx context.Context, db *sql.DB, ns string, olderThan time.Duration, batch int) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	now, err := t.ServerNow(ctx, db)
	if err != nil {
		return 0, err
	}
	return t.Prune(ctx, db, ns, now.Add(-olderThan), batch)
}

// Prune deletes the finished rows ('done' or 'failed') of namespace ns whose
// slot is before cutoff, never a 'running' claim and never a row of another
// namespace, and returns how many it deleted. It works
// in batches of at most batch rows, each its own short READ COMMITTED
// transaction (so InnoDB keeps no lock on the rows a batch only looked at,
// and no batch holds row locks for long), until a batch finds fewer rows
// than batch or ctx ends. On PostgreSQL a batch is DELETE ... WHERE
// (namespace, job, slot) IN (SELECT ... LIMIT n); on MySQL/MariaDB, DELETE
// ... LIMIT n.
func (t *Table) Prune(ctx context.Context, db *sql.DB, ns string, cutoff time.Time, batch int) (int64, error) {
	if batch < 1 {
		batch = PruneBatch
	}
	var query string
	if t.pg() {
		// the outer status test is re-checked on a row claimed meanwhile
		query = `DELETE FROM ` + t.q + ` WHERE (namespace, job, slot) IN (
	SELECT namespace, job, slot FROM ` + t.q + ` WHERE namespace = $1 AND slot < $2 AND status <> 'running' LIMIT $3
) AND status <> 'running'`
	} else {
		query = "DELETE FROM " + t.q + " WHERE namespace = ? AND slot < ? AND status <> 'running' LIMIT ?"
	}
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, err := t.pruneBatch(ctx, db, query, ns, cutoff, batch)
		total += n
		if err != nil {
			return total, t.wrap("prune", err)
		}
		if n < int64(batch) {
			return total, nil
		}
	}
}

func (t *Table) pruneBatch(ctx context.Context, db *sql.DB, query, ns string, cutoff time.Time, batch int) (int64, error) {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, err
	}
	res, err := tx.ExecContext(ctx, query, ns, t.slotArg(cutoff), batch)
	if err != nil {
		_ = tx.Rollback()
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		_ = tx.Rollback()
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	return n, nil
}
