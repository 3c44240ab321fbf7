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
	// Controls says whether the ledger's controls table exists
	// (Table.ControlsOn): the job's schedule is then recorded and its
	// 'rerun' slots run after each firing (schedule.go).
	Controls bool
	// DB is the primary's pool, where the schedule is recorded; nil
	// inside the caller's transaction (nothing is recorded).
	DB *sql.DB
}

// Scheduled is RunScheduled, written once for every adapter: it runs the
// slot of now (the configured Now, else time.Now()) under s with run, and first, when cfg asks
// for catch-up (ormlock.WithCatchUp), the missed slots before it, each
// claimed by run as a normal run is; then the job's slots an operator
// marked 'rerun' (schedule.go). open is called at every call (the
// adapter checks its arguments and db there); run is the adapter's
// RunOnce, which puts the slot in fn's context. A skip (ErrAlreadyDone,
// ErrNotAcquired) of a missed slot goes on to the next; a failure stops
// and is returned. When a missed slot ran and the current one is a skip,
// the result is nil.
//
// The catch-up window is judged by the database server's clock, read with
// the ledger (one statement), as Prune's cut is (see clock.go); the
// caller's clock (schedhook.Clock, read then, after any wait before the
// call) more than MaxClockSkew from it is an error, and nothing runs. A
// missed slot that has left the window by the time its turn comes (the
// server's clock at the read plus the time since) is not run.
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
	if r.Controls {
		r.recordSchedule(ctx, job, s)
	}
	now := r.Cfg.NowTime()
	current := s.Slot(now)
	runCurrent := func(slot time.Time) error { return r.afterCurrent(ctx, job, run, run(slot)) }
	mode := r.Cfg.Firing
	if r.Cfg.CatchUpWindow <= 0 || mode == config.FiringLater {
		return runCurrent(current)
	}
	if !sched.Enumerable(s) {
		return fmt.Errorf("%w: %s: WithCatchUp needs a schedule made by ormlock.Cron or ormlock.Every (got %T)", errs.ErrInvalidArgument, verb, s)
	}
	if err := ValidateJob(verb, job); err != nil {
		return err
	}
	w, err := r.window(ctx, verb, job, s, current)
	if err != nil {
		return err
	}
	slots, taken := w.slots, w.taken
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
		if taken[current.UnixMicro()] && len(missed) > 0 && w.within(missed[0]) {
			return runCurrent(missed[0])
		}
		return runCurrent(current)
	}
	ran := false
	for _, slot := range missed {
		if !w.within(slot) {
			// out of the window since the read: a Prune may have
			// deleted its row meanwhile
			continue
		}
		switch err := run(slot); {
		case err == nil:
			ran = true
		case skip(err):
		default:
			// fn's error stays visible to errors.Is and errors.As
			return errs.Wrap(err, "job %q, catch-up of slot %s", job, slot.Format(time.RFC3339))
		}
	}
	err = runCurrent(current)
	if ran && skip(err) {
		return nil
	}
	return err
}

func skip(err error) bool {
	return errors.Is(err, errs.ErrAlreadyDone) || errors.Is(err, errs.ErrNotAcquired)
}

// catchUpWindow is what a catch-up read: the slots of the window, oldest
// first (the newest MaxCatchUp of them); the slots among them and the
// current one whose row is 'done' or 'running' (by UnixMicro); the
// server's clock as the same statement read it (server), the local
// monotonic clock just after it (at), and the window's width.
type catchUpWindow struct {
	slots  []time.Time
	taken  map[int64]bool
	server time.Time
	at     time.Time
	width  time.Duration
}

// within reports whether slot is still after the window's start: the
// server's clock now (its reading plus the time since) minus the window.
func (w catchUpWindow) within(slot time.Time) bool {
	return slot.After(w.server.Add(time.Since(w.at)).Add(-w.width))
}

// window reads the catch-up window before current: the slots of s after
// the server's now minus the window and before current, and which of them
// ran. The ledger statement reads the server's clock with the rows, which
// it reads for every slot that a server within MaxClockSkew of the
// caller's clock (schedhook.Clock, read around it) can put in the window;
// a server further off is an error (checkSkew).
func (r Reader) window(ctx context.Context, verb, job string, s sched.Slotter, current time.Time) (catchUpWindow, error) {
	clock := r.Cfg.ClockFunc()
	before := clock()
	// the slots of the widest window the server's clock may make, newest
	// MaxCatchUp
	var slots []time.Time
	for t := sched.Next(s, before.Add(-r.Cfg.CatchUpWindow-MaxClockSkew)); !t.IsZero() && t.Before(current); t = sched.Next(s, t) {
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
	server, taken, err := r.T.taken(ctx, r.Q, r.Cfg.Namespace, job, from, current)
	if err != nil {
		return catchUpWindow{}, err
	}
	at := time.Now()
	if err := checkSkew(verb, job, before, clock(), server); err != nil {
		return catchUpWindow{}, err
	}
	start := server.Add(-r.Cfg.CatchUpWindow)
	i := 0
	for i < len(slots) && !slots[i].After(start) {
		i++
	}
	return catchUpWindow{slots: slots[i:], taken: taken, server: server, at: at, width: r.Cfg.CatchUpWindow}, nil
}

// taken reads the server's clock and the slots of job in [from, to] whose
// row is 'done' or 'running' (by UnixMicro), in one statement: the row of
// the clock, left-joined to the ledger's rows.
func (t *Table) taken(ctx context.Context, q Querier, ns, job string, from, to time.Time) (time.Time, map[int64]bool, error) {
	rows, err := q.QueryContext(ctx, t.sql.takenSQL(t), ns, job, t.slotArg(from), t.slotArg(to))
	if err != nil {
		return time.Time{}, nil, t.wrap(takenWhat, err)
	}
	defer rows.Close()
	var server time.Time
	out := map[int64]bool{}
	for rows.Next() {
		slot, ok, err := t.sql.scanTaken(t, rows.Scan, &server)
		if err != nil {
			return time.Time{}, nil, err
		}
		if ok {
			out[slot.UnixMicro()] = true
		}
	}
	if err := rows.Err(); err != nil {
		return time.Time{}, nil, t.wrap(takenWhat, err)
	}
	if server.IsZero() {
		return time.Time{}, nil, fmt.Errorf("ormlock: ledger table %q: %s: the server's clock came back without a row", t.name, takenWhat)
	}
	return server.UTC(), out, nil
}

// takenWhat names taken's statement in its errors.
const takenWhat = "read the slots to catch up"
