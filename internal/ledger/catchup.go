package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/sched"
)

// MaxCatchUp is the most missed slots one RunScheduled call considers: the
// newest ones of the window.
const MaxCatchUp = 1000

// Querier reads the ledger (a *sql.DB, a *sql.Tx, a *sql.Conn).
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Reader is what the catch-up of RunScheduled reads: the call's settings
// (the adapter's defaults with the call's options), the ledger table and a
// querier on the primary.
type Reader struct {
	Cfg config.Config
	T   *Table
	Q   Querier
}

// Scheduled is RunScheduled, written once for every adapter: it runs the
// slot of now (the configured Now, else time.Now()) under s with run, and first, when cfg asks
// for catch-up (ormlock.WithCatchUp), the missed slots before it, each
// claimed by run as a normal run is. open is called on every call, before
// run: it gives the call's settings (whose catch-up window says whether
// there is a catch-up at all), the ledger table and a querier, and the
// adapter validates its db there, so its error is returned before anything
// runs; the ledger is read only for a catch-up. run is the adapter's
// RunOnce, which puts the slot in fn's context. A skip (ErrAlreadyDone,
// ErrNotAcquired) of a missed slot goes on to the next; a failure stops and
// is returned.
// When a missed slot ran and the current one is a skip, the result is nil.
func Scheduled(ctx context.Context, verb, job string, s sched.Slotter, open func() (Reader, error), run func(slot time.Time) error) error {
	if s == nil {
		return fmt.Errorf("%w: %s: nil schedule", errs.ErrInvalidArgument, verb)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	r, err := open()
	if err != nil {
		return err
	}
	now := r.Cfg.NowOr(time.Now)
	current := s.Slot(now)
	mode := r.Cfg.Firing
	if r.Cfg.CatchUpWindow <= 0 || mode == config.FiringLater {
		return run(current)
	}
	if !sched.Enumerable(s) {
		return fmt.Errorf("%w: %s: WithCatchUp needs a schedule made by ormlock.Cron or ormlock.Every (got %T)", errs.ErrInvalidArgument, verb, s)
	}
	if err := ValidateJob(verb, job); err != nil {
		return err
	}
	slots, taken, err := r.window(ctx, job, s, now, current)
	if err != nil {
		return err
	}
	var missed []time.Time
	if r.Cfg.CatchUpPolicy == config.CatchUpLatest || mode == config.FiringFirst {
		// the newest slot before the current one, if it has not run: when
		// it has, older ones do not matter to this policy (and a replica
		// that read the ledger after another caught up must not run an
		// older one)
		if n := len(slots); n > 0 && !taken[slots[n-1].UnixMicro()] {
			missed = slots[n-1:]
		}
	} else {
		for _, t := range slots {
			if !taken[t.UnixMicro()] {
				missed = append(missed, t)
			}
		}
	}
	if mode == config.FiringFirst {
		// one firing, one run: the current slot if it has not run, else
		// the newest missed one
		if taken[current.UnixMicro()] && len(missed) > 0 {
			return run(missed[0])
		}
		return run(current)
	}
	ran := false
	for _, slot := range missed {
		switch err := run(slot); {
		case err == nil:
			ran = true
		case skip(err):
		default:
			// fn's error stays visible to errors.Is and errors.As
			return errs.Wrap(err, "job %q, catch-up of slot %s", job, slot.Format(time.RFC3339))
		}
	}
	err = run(current)
	if ran && skip(err) {
		return nil
	}
	return err
}

func skip(err error) bool {
	return errors.Is(err, errs.ErrAlreadyDone) || errors.Is(err, errs.ErrNotAcquired)
}

// window returns the slots of s after now-window and before current,
// oldest first (the newest MaxCatchUp of them), and the slots among them
// and current whose row is 'done' or 'running' (by UnixMicro).
func (r Reader) window(ctx context.Context, job string, s sched.Slotter, now, current time.Time) ([]time.Time, map[int64]bool, error) {
	var slots []time.Time
	for t := sched.Next(s, now.Add(-r.Cfg.CatchUpWindow)); !t.IsZero() && t.Before(current); t = sched.Next(s, t) {
		slots = append(slots, t)
		if len(slots) > 2*MaxCatchUp {
			slots = append(slots[:0], slots[len(slots)-MaxCatchUp:]...)
		}
	}
	if len(slots) > MaxCatchUp {
		slots = slots[len(slots)-MaxCatchUp:]
	}
	from := current
	if len(slots) > 0 {
		from = slots[0]
	}
	taken, err := r.T.taken(ctx, r.Q, r.Cfg.Namespace, job, from, current)
	if err != nil {
		return nil, nil, err
	}
	return slots, taken, nil
}

// taken returns the slots of job in [from, to] whose row is 'done' or
// 'running', by UnixMicro.
func (t *Table) taken(ctx context.Context, q Querier, ns, job string, from, to time.Time) (map[int64]bool, error) {
	var query string
	if t.pg() {
		query = `SELECT slot FROM ` + t.q + ` WHERE namespace = $1 AND job = $2 AND slot >= $3 AND slot <= $4 AND status <> 'failed'`
	} else {
		query = "SELECT DATE_FORMAT(slot, " + mysqlFormat + ") FROM " + t.q + " WHERE namespace = ? AND job = ? AND slot >= ? AND slot <= ? AND status <> 'failed'"
	}
	rows, err := q.QueryContext(ctx, query, ns, job, t.slotArg(from), t.slotArg(to))
	if err != nil {
		return nil, t.wrap("read the slots to catch up", err)
	}
	defer rows.Close()
	out := map[int64]bool{}
	for rows.Next() {
		var slot time.Time
		if t.pg() {
			if err := rows.Scan(&slot); err != nil {
				return nil, t.wrap("read the slots to catch up", err)
			}
		} else {
			var s string
			if err := rows.Scan(&s); err != nil {
				return nil, t.wrap("read the slots to catch up", err)
			}
			if slot, err = parseMySQLTime(s); err != nil {
				return nil, err
			}
		}
		out[slot.UnixMicro()] = true
	}
	if err := rows.Err(); err != nil {
		return nil, t.wrap("read the slots to catch up", err)
	}
	return out, nil
}
