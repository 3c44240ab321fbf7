package scheduler

import (
	"fmt"
	"sync"
	"time"

	"github.com/ormlock/ormlock"
)

// WithStrict refuses every job that has no schedule of its own
// ([WithJobSchedule]): its Lock returns an error wrapping
// [ormlock.ErrInvalidArgument] naming the job, which is also reported, and
// gocron skips the run. With it, NewLocker's default schedule may be nil. A
// [JobWrapper] takes its job's schedule as an argument, or from
// WithJobSchedule when the argument is nil, and refuses a job with neither
// whether strict or not. Applies to NewLocker and JobWrapper. The default is not
// strict: a job without its own schedule runs on the Locker's default. See
// docs/SCHEDULES.md (A trigger denser than its schedule).
func WithStrict() Option { return func(c *config) { c.strict = true } }

// refires watches, per job, the slots this instance's firings map to: a
// job that fires again within a slot it has already run or skipped fires
// more often than the schedule it is mapped by, and all those firings but
// one are skipped in silence (skips are not reported). One repeat in a slot
// can happen legitimately — a firing near the midpoint between two slots
// maps, by timer jitter, to the same slot as its neighbour (SlotTolerance),
// or a manual gocron RunNow — so the error handler hears of it at the
// second repeat in one slot, or at a repeat in a slot that follows a slot
// with a repeat; once per slot.
type refires struct {
	mu   sync.Mutex
	jobs map[string]*firings
}

type firings struct {
	slot         time.Time
	n            int  // firings mapped to slot
	prevRepeated bool // the previous slot of the job saw a repeat
	reported     bool
}

// fired records a firing of job for slot under schedule s, and returns the
// error to report when it shows a trigger denser than s, else nil.
func (r *refires) fired(job string, slot time.Time, s ormlock.Schedule) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.jobs == nil {
		r.jobs = make(map[string]*firings)
	}
	f := r.jobs[job]
	if f == nil {
		f = &firings{}
		r.jobs[job] = f
	}
	if !f.slot.Equal(slot) {
		f.prevRepeated = f.n > 1 && !f.slot.IsZero()
		f.slot, f.n, f.reported = slot, 0, false
	}
	f.n++
	if f.reported || f.n < 2 || (f.n == 2 && !f.prevRepeated) {
		return nil
	}
	f.reported = true
	return fmt.Errorf("ormlock: scheduler: job %q fired %d times within its slot %s of schedule %s, which it has already run or skipped: "+
		"the job's trigger fires more often than this schedule, and all its firings in a slot but one do nothing; "+
		"give the job its own schedule (scheduler.WithJobSchedule, or scheduler.WithStrict to require one)",
		job, f.n, slot.Format(time.RFC3339), scheduleName(s))
}

// scheduleName names s for an error: its String method (ormlock's
// schedules have one: "0 0 * * * in Europe/Berlin", "every 1h0m0s in
// UTC"), else its type.
func scheduleName(s ormlock.Schedule) string {
	if st, ok := s.(fmt.Stringer); ok {
		return st.String()
	}
	return fmt.Sprintf("%T", s)
}
