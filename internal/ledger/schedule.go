package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
	"weak"

	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/sched"
)

// RunScheduled and the operators' controls (docs/OPERATIONS.md):
//
//   - the job's schedule is recorded in its controls row (its String,
//     which sched.Parse reads back) once per process, pool, table,
//     namespace and job, so that skip and rerun can check that a slot is
//     a firing of it (act.go). A schedule that is not ormlock's (Cron,
//     Every) is not recorded.
//   - after its own slot, a firing runs the job's slots an operator marked
//     'rerun', oldest first, each once (its claim takes the row as it
//     takes a failed one; on other replicas the same slot is
//     ErrNotAcquired or ErrAlreadyDone): one read of the ledger per
//     firing, by its primary key's prefix (namespace, job). None runs
//     when the firing's own slot is paused. Under schedhook.OneRun (a
//     scheduler that answers one firing with one run) the reruns are read
//     only when the own slot was a skip, and the first that runs ends
//     the firing.
//
// Both happen only where the controls table exists (ControlsOn): a
// ledger without it costs nothing more.

// MaxReruns bounds the 'rerun' slots one firing runs.
const MaxReruns = 100

// recordedKey names a schedule recorded for a job.
type recordedKey struct {
	db                     weak.Pointer[sql.DB]
	table, ns, job, marker string
}

var recorded sync.Map // recordedKey -> struct{}

// recordSchedule records s's text in job's controls row on db, once per
// process (a failure is tried again at the next firing).
func (r Reader) recordSchedule(ctx context.Context, job string, s sched.Slotter) {
	str, ok := s.(fmt.Stringer)
	if r.DB == nil || !sched.Enumerable(s) || !ok {
		return
	}
	k := recordedKey{db: lockproto.WeakOf(r.DB), table: r.T.name, ns: r.Cfg.Namespace, job: job, marker: str.String()}
	if _, done := recorded.Load(k); done {
		return
	}
	if err := inTx(ctx, r.DB, func(tx *sql.Tx) error {
		return r.T.ctl.recordSchedule(ctx, r.T, tx, r.Cfg.Namespace, job, k.marker)
	}); err == nil {
		if _, loaded := recorded.LoadOrStore(k, struct{}{}); !loaded {
			runtime.AddCleanup(r.DB, func(k recordedKey) { recorded.Delete(k) }, k) // forgotten with the pool
		}
	}
}

// reruns reads the slots of job marked 'rerun', oldest first. The read
// costs one lookup of the job's controls row by its key while no rerun
// is pending, however big the ledger: the job's rows are read only when
// an operator asked for reruns that a firing has not yet seen done
// (rerun_asked > rerun_seen); one that finds none left records so.
func (r Reader) reruns(ctx context.Context, job string) ([]time.Time, error) {
	rows, err := r.Q.QueryContext(ctx, r.T.ctl.rerunsSQL(r.T), r.Cfg.Namespace, job, MaxReruns)
	if err != nil {
		return nil, r.T.wrap("read the slots to rerun", err)
	}
	defer rows.Close()
	var (
		out   []time.Time
		asked int64
		read  bool
	)
	for rows.Next() {
		a, slot, ok, err := r.T.ctl.scanRerun(rows.Scan)
		if err != nil {
			return nil, r.T.wrap("read the slots to rerun", err)
		}
		asked, read = a, true
		if ok {
			out = append(out, slot)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, r.T.wrap("read the slots to rerun", err)
	}
	rows.Close()
	if read && len(out) == 0 && r.DB != nil {
		// every rerun asked up to asked has run (or was pruned): later
		// firings read the controls row only (inside the caller's
		// transaction, a later firing outside one records it)
		if err := r.T.ctl.seenReruns(ctx, r.T, r.DB, r.Cfg.Namespace, job, asked); err != nil {
			return nil, r.T.wrap("record the reruns done", err)
		}
	}
	return out, nil
}

// afterCurrent runs, after the firing's own slot (whose result is err),
// the job's slots marked 'rerun' (see above), and returns the firing's
// result: err unless it is a skip and a rerun ran (nil) or failed (its
// error).
func (r Reader) afterCurrent(ctx context.Context, job string, run func(slot time.Time) error, err error) error {
	if !r.Controls || errors.Is(err, errs.ErrPaused) || r.Cfg.OneRun && !skip(err) {
		// schedhook.OneRun: a rerun only in place of an own slot not run
		return err
	}
	slots, rerr := r.reruns(ctx, job)
	if rerr != nil {
		return errs.Join(err, rerr)
	}
	ran := false
	for _, slot := range slots {
		switch rerr := run(slot); {
		case rerr == nil:
			ran = true
			if r.Cfg.OneRun {
				return nil
			}
		case skip(rerr):
		case errors.Is(rerr, errs.ErrPaused):
			return err
		default:
			rerr = errs.Wrap(rerr, "job %q, rerun of slot %s", job, slot.Format(time.RFC3339))
			if err == nil || skip(err) {
				return rerr
			}
			return errs.Join(err, rerr)
		}
	}
	if ran && skip(err) {
		return nil
	}
	return err
}
