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
func (t *Table) PruneOlderThan(ctx context.Context, db *sql.DB, cfg config.Config, olderThan time.Duration, batch int) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	now, err := t.ServerNow(ctx, db)
	if err != nil {
		return 0, err
	}
	return t.Prune(ctx, db, cfg, now.Add(-olderThan), batch)
}

// Prune deletes the rows of cfg's namespace whose slot is before cutoff
// and whose run is over: the finished rows ('done' or 'failed'), then the
// stale ones ('running' while the run's lock is free: see MarkStale),
// never a 'running' row whose lock is held and never a row of another
// namespace; it returns how many it deleted.
//
// The finished rows go in batches of at most batch rows, each its own
// short READ COMMITTED transaction (so InnoDB keeps no lock on the rows a
// batch only looked at, and no batch holds row locks for long), until a
// batch finds fewer rows than batch or ctx ends. On PostgreSQL a batch is
// DELETE ... WHERE (namespace, job, slot) IN (SELECT ... LIMIT n); on
// MySQL/MariaDB, DELETE ... LIMIT n.
//
// The 'running' rows before cutoff are then read, batch at a time, and
// each one's lock is looked up (on db); one whose lock is free is deleted
// by a statement that matches only that claim (status 'running', its
// owner and started_at), in a transaction of its own: a run that recorded
// its end, or a new claim of the slot, after the row was read no longer
// matches (the DELETE reads the latest committed row), so neither a
// finished run's row nor a live claim is ever taken for a stale one.
func (t *Table) Prune(ctx context.Context, db *sql.DB, cfg config.Config, cutoff time.Time, batch int) (int64, error) {
	if batch < 1 {
		batch = PruneBatch
	}
	n, err := t.pruneFinished(ctx, db, cfg.Namespace, cutoff, batch)
	if err != nil {
		return n, err
	}
	m, err := t.pruneStale(ctx, db, cfg, cutoff, batch)
	return n + m, err
}

func (t *Table) pruneFinished(ctx context.Context, db *sql.DB, ns string, cutoff time.Time, batch int) (int64, error) {
	query := t.sql.pruneFinishedSQL(t)
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, err := execCommitted(ctx, db, query, ns, t.slotArg(cutoff), batch)
		total += n
		if err != nil {
			return total, t.wrap("prune", err)
		}
		if n < int64(batch) {
			return total, nil
		}
	}
}

// staleFloor is below every slot (ValidateSlot: years 1000 to 9999): the
// first key of pruneStale's walk.
var staleFloor = time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC)

// pruneStale deletes the stale rows of cfg's namespace before cutoff (see
// Prune), walking the 'running' rows in (slot, job) order.
func (t *Table) pruneStale(ctx context.Context, db *sql.DB, cfg config.Config, cutoff time.Time, batch int) (int64, error) {
	next, del := t.sql.pruneStaleSQL(t)
	var total int64
	after, afterJob := staleFloor, ""
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		rs, err := t.query(ctx, db, next, cfg.Namespace, t.slotArg(cutoff), t.slotArg(after), afterJob, batch)
		if err != nil {
			return total, t.wrap("prune stale runs", err)
		}
		for _, r := range rs {
			h, err := t.runLock(ctx, db, cfg, r.Job, r.Slot)
			if err != nil {
				return total, err
			}
			if h.Held {
				continue
			}
			n, err := execCommitted(ctx, db, del, r.Namespace, r.Job, t.slotArg(r.Slot), r.Owner, t.slotArg(r.Started))
			total += n
			if err != nil {
				return total, t.wrap("prune a stale run", err)
			}
		}
		if len(rs) < batch {
			return total, nil
		}
		after, afterJob = rs[len(rs)-1].Slot, rs[len(rs)-1].Job
	}
}

// execCommitted runs query in a READ COMMITTED transaction of its own on
// db and returns the rows it affected.
func execCommitted(ctx context.Context, db *sql.DB, query string, args ...any) (int64, error) {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, err
	}
	res, err := tx.ExecContext(ctx, query, args...)
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
