package webui

import (
	"context"
	"database/sql"
	"net/http"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/sched"
	"github.com/ormlock/ormlock/internal/verbs"
)

// The ledger's statuses that the operators' actions write: a slot that
// never runs (paused, or skipped) and one asked to run again.
const (
	statusSkipped = "skipped"
	statusRerun   = "rerun"
)

// actor serves the actions and a job's control for the handler hd, whose
// settings, reader and turns at the database it shares.
type actor struct {
	hd  *handler
	s   *settings
	r   *reader
	sem chan struct{}
}

func actorOf(h *handler) actor { return actor{hd: h, s: h.s, r: h.r, sem: h.sem} }

// csp is the Content-Security-Policy of every response: forms may post
// to the view itself only when actions are on.
func (s *settings) csp() string {
	if s.actions != nil {
		return ActionsContentSecurityPolicy
	}
	return ContentSecurityPolicy
}

// actView is what a page offers when actions are on.
type actView struct {
	Author  string // who the service says acts ("" when it refuses)
	Refused string // why the service's function refused this reader

	// the job page
	Pause, Resume string     // confirmation pages
	Upcoming      []upcoming // the next firings of a scheduled job
}

// jobControl is a job's row of the controls table and its latest actions,
// as its page shows them (whether actions are on or not).
type jobControl struct {
	Paused   bool
	PausedBy string // "alice: incident 42", when paused
	PausedAt shownTime
	Log      []actionRow
	Error    string
}

type upcoming struct {
	Slot shownTime
	Skip string
}

type actionRow struct {
	ID                             int64
	Kind, Job, Key, Author, Reason string
	Outcome                        string
	Slot, At                       shownTime
}

// upcomingShown is how many of a scheduled job's next firings its page
// offers to skip.
const upcomingShown = 3

// actionLogShown is how many entries of a job's actions log its page shows.
const actionLogShown = 20

// offerActions adds the actions' links to v: a job's pause or resume, its
// runs' skip and rerun and its next firings' skip, a leader's resign. The
// links lead to confirmation pages (GET), whose forms post the action.
func (h actor) offerActions(ctx context.Context, req *http.Request, v *view) {
	a := &actView{}
	v.Act = a
	a.Author, a.Refused = h.s.actions.authorOf(req)
	if a.Author == "" {
		return
	}
	p := v.P
	if o := v.Overview; o != nil {
		for i := range o.Leaders {
			if i < len(h.s.leaders) {
				o.Leaders[i].Resign = p.link("act", "kind", string(ormlock.ActionResign), "key", h.s.leaders[i].String())
			}
		}
	}
	j := v.Job
	if j == nil {
		return
	}
	job := p.job
	link := func(kind ormlock.ActionKind, slot time.Time) string {
		s := ""
		if !slot.IsZero() {
			s = slot.UTC().Format(time.RFC3339)
		}
		return p.link("act", "kind", string(kind), "job", job, "slot", s)
	}
	for i := range j.Runs {
		r := &j.Runs[i]
		switch r.Status {
		case "failed", "missed", statusSkipped:
			r.Rerun = link(ormlock.ActionRerun, r.slot)
		}
		switch r.Status {
		case "failed", "missed", statusRerun:
			r.Skip = link(ormlock.ActionSkip, r.slot)
		}
	}
	if s, ok := h.s.schedules[job]; ok {
		t := time.Now()
		for range upcomingShown {
			t = sched.Next(s, t)
			if t.IsZero() {
				break
			}
			a.Upcoming = append(a.Upcoming, upcoming{Slot: showTime(t, p.loc), Skip: link(ormlock.ActionSkip, t)})
		}
	}
	a.Pause, a.Resume = link(ormlock.ActionPause, time.Time{}), link(ormlock.ActionResume, time.Time{})
}

// control reads job's row of the controls table and its latest actions
// in read-only transactions, as the JSON API does; a ledger whose
// controls table does not exist yet (Migrate not run since upgrading) has
// none to show.
func (h actor) control(ctx context.Context, d lockproto.Dialect, job string, loc *time.Location) *jobControl {
	c := &jobControl{}
	if !h.hasControls() {
		return c
	}
	var cs []ormlock.JobControl
	var log []ormlock.ActionRecord
	err := h.r.ro(ctx, func(tx *sql.Tx) error {
		var err error
		if cs, err = verbs.Controls(ctx, binder{h.r, d, tx}, "webui", nil); err != nil {
			return err
		}
		log, err = verbs.Actions(ctx, binder{h.r, d, tx}, "webui", job, actionLogShown, nil)
		return err
	})
	switch {
	case lockproto.IsMissingTable(err):
		return c
	case err != nil:
		c.Error = h.hd.problem(ctx, err)
		return c
	}
	for _, r := range cs {
		if r.Job == job && r.Paused {
			c.Paused, c.PausedAt = true, showTime(r.Changed, loc)
			c.PausedBy = clean(r.Author, maxAuthorLen)
			if r.Reason != "" {
				c.PausedBy += ": " + clean(r.Reason, maxReasonLen)
			}
		}
	}
	for _, r := range log {
		c.Log = append(c.Log, actionRowOf(r, loc))
	}
	return c
}

// markPaused marks the paused jobs among rows (whose ledger names are
// jobs, in order) from the controls table; a ledger without one has none.
func (h actor) markPaused(ctx context.Context, d lockproto.Dialect, rows []jobRow, jobs []string) {
	if !h.hasControls() {
		return
	}
	var cs []ormlock.JobControl
	err := h.r.ro(ctx, func(tx *sql.Tx) error {
		var err error
		cs, err = verbs.Controls(ctx, binder{h.r, d, tx}, "webui", nil)
		return err
	})
	if err != nil {
		if !lockproto.IsMissingTable(err) {
			h.hd.problem(ctx, err)
		}
		return
	}
	paused := map[string]string{}
	for _, c := range cs {
		if c.Paused {
			paused[c.Job] = "paused by " + clean(c.Author, maxAuthorLen)
			if c.Reason != "" {
				paused[c.Job] += ": " + clean(c.Reason, maxReasonLen)
			}
		}
	}
	for i := range rows {
		if i < len(jobs) {
			rows[i].Paused = paused[jobs[i]]
		}
	}
}

// hasControls reports whether the ledger can have a controls table and an
// actions log: none exists when their names would pass 63 bytes (as no
// fence table does).
func (h actor) hasControls() bool {
	return len(h.s.ledger+"_controls") <= 63 && len(h.s.ledger+"_actions") <= 63
}

func actionRowOf(r ormlock.ActionRecord, loc *time.Location) actionRow {
	return actionRow{
		ID: r.ID, Kind: clean(string(r.Kind), 16), Job: clean(r.Job, 200), Key: clean(r.Key, 300),
		Author: clean(r.Author, maxAuthorLen), Reason: clean(r.Reason, maxReasonLen), Outcome: clean(r.Outcome, 500),
		Slot: showTime(r.Slot, loc), At: showTime(r.At, loc),
	}
}

// verbOptions are the options of the verbs the actions call: the view's
// namespace and ledger table.
func (h actor) verbOptions() []ormlock.Option {
	return []ormlock.Option{ormlock.WithNamespace(h.s.namespace), ormlock.WithLedgerTable(h.s.ledger)}
}
