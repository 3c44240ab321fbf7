package webui

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"sort"
	"strconv"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/ledger"
	"github.com/ormlock/ormlock/internal/lockproto"
)

const (
	levelError = slog.LevelError
	levelInfo  = slog.LevelInfo
)

func attr(k, v string) slog.Attr { return slog.String(k, v) }

// view is what page.html renders. Every string in it that came from the
// database or the URL went through clean.
type view struct {
	Title   string
	CSS     string
	Problem string // the page could not be built: why
	P       params

	Now      shownTime
	Server   string // "PostgreSQL primary", ...
	Refused  string // the server is refused (a standby...): why
	ZoneName string
	Zones    []zoneLink
	Self     string // this page's shareable URL
	Refresh  int    // seconds, 0: none

	Overview *overview
	Job      *jobPage
	Act      *actView // actions are on (WithActions): what the page offers
}

type zoneLink struct {
	Name, Href string
	Current    bool
}

type overview struct {
	Jobs      []jobRow
	JobsError string
	Next      string // link to the next page of jobs
	First     string // link to the first page when not on it
	Namespace string
	Ledger    string
	// StripSlots is the most slots a strip shows (?limit=)
	StripSlots int

	Locks        []holderRow
	Leaders      []leaderRow
	Rates        []rateRow
	LocksError   string
	Fences       []fenceRow
	FencesError  string
	FencesMore   bool
	FencesAbsent bool
}

type jobRow struct {
	Name, Href string
	Last       string // the newest run's status
	LastAt     shownTime
	Slots      []slotCell
	Failed     int
	Missed     int
	Scheduled  bool
	Error      string
	ShownRuns  int
	Cells      int          // slots in the strip, which Failed and Missed count
	Now        []runningNow // its running runs (not stale), newest first
	Paused     string       // "paused by AUTHOR: REASON" when an operator paused it
	NowMore    int          // running runs beyond those in Now
}

// runningNow is a running run of a job, as the overview names it.
type runningNow struct {
	Owner, For, Href string
	// Lease is " (lease)" for a run that holds a live lease (ormlock.Run's
	// Mechanism), "" for one that holds a lock of the server
	Lease string
}

type slotCell struct {
	Class, Href, Title string
}

type holderRow struct {
	Key, Lock, Status, StatusClass                    string
	Owner, User, Application, Client, Database, State string
	Mode                                              string
	PID                                               int64
	StateFor, HeldFor                                 string
	Since                                             shownTime
	Waiters                                           int
	Error                                             string
	// Mechanism is ormlock.HolderInfo.Mechanism ("advisory", "named",
	// "lease"); a lease's Epoch and ExpiresIn ("" otherwise)
	Mechanism, Epoch, ExpiresIn string
}

type leaderRow struct {
	holderRow
	Token  string
	Resign string // the resign action's confirmation page, when actions are on
}

type fenceRow struct {
	Key   string
	Token int64
}

type jobPage struct {
	Name      string
	Runs      []runRow
	Error     string
	Plot      *plot
	Scheduled bool
	Limit     int
	More      string
	Control   *jobControl // paused or not, and the job's actions log
}

type runRow struct {
	ID, Status, StatusClass, Owner, Duration, Error string
	Slot, Started, Finished                         shownTime
	// Skip and Rerun are the actions' confirmation pages, when actions
	// are on and the slot's status allows them
	Skip, Rerun string
	slot        time.Time
}

// base fills what every page shows; page and here (parameter, value
// pairs) name the page, so that the zone links keep it.
func (h *handler) base(p params, title, page string, here ...string) *view {
	v := &view{Title: title, P: p, Now: showTime(time.Now(), p.loc), ZoneName: p.loc.String(), Refresh: int(p.refresh / time.Second)}
	seen := map[string]bool{}
	for _, z := range []*time.Location{time.UTC, h.s.zone, p.loc} {
		if seen[z.String()] {
			continue
		}
		seen[z.String()] = true
		tz := z.String()
		if z == h.s.zone && p.tz == "" {
			tz = ""
		}
		v.Zones = append(v.Zones, zoneLink{Name: clean(z.String(), 64), Href: p.link(page, append(append([]string{}, here...), "tz", tz)...), Current: z.String() == p.loc.String()})
	}
	return v
}

// server reads the dialect and checks the server; a refused server is
// reported in v, and false returned: its locks are not the primary's.
func (h *handler) server(ctx context.Context, v *view) (lockproto.Dialect, bool, error) {
	d, err := h.r.dialectOf(ctx)
	if err != nil {
		return 0, false, err
	}
	name := d.Product()
	err = h.r.ro(ctx, func(tx *sql.Tx) error { return h.r.checkServer(ctx, tx, d) })
	switch {
	case errors.Is(err, ormlock.ErrUnsupportedDialect):
		v.Server = name + ": refused"
		v.Refused = clean(err.Error(), 500)
		return d, false, nil
	case err != nil:
		return 0, false, err
	}
	v.Server = name
	return d, true, nil
}

func (h *handler) overview(ctx context.Context, p params) (*view, error) {
	if err := checkJobParam("?after", p.after, 0); err != nil {
		return nil, err
	}
	limit := p.clampLimit(defaultLimit, maxStrip)
	v := h.base(p, "ormlock: jobs, locks and leaders", "", "after", p.after, "limit", limitParam(p))
	v.Self = p.link("", "after", p.after, "limit", limitParam(p))
	d, genuine, err := h.server(ctx, v)
	if err != nil {
		return nil, err
	}
	if err := checkJobParam("?after", p.after, d); err != nil {
		return nil, err
	}
	o := &overview{Namespace: clean(h.s.namespace, 128), Ledger: h.s.ledger, StripSlots: limit}
	v.Overview = o
	now := time.Now()
	var shown []string // the jobs' names as the ledger holds them
	err = h.r.ro(ctx, func(tx *sql.Tx) error {
		names, err := h.r.jobs(ctx, tx, d, p.after, jobsPerPage+1)
		if err != nil {
			return err
		}
		if len(names) > jobsPerPage {
			names = names[:jobsPerPage]
			o.Next = p.link("", "after", names[len(names)-1], "limit", limitParam(p))
		}
		budget := maxLiveness
		shown = names
		for _, name := range names {
			runs, err := h.r.runs(ctx, tx, d, name, limit, lookups(genuine, &budget))
			if err != nil {
				return err
			}
			o.Jobs = append(o.Jobs, h.jobRow(p, name, runs, limit, now))
		}
		return nil
	})
	if err != nil {
		o.JobsError = h.problem(ctx, err)
	} else {
		actorOf(h).markPaused(ctx, d, o.Jobs, shown)
	}
	if p.after != "" {
		o.First = p.link("", "limit", limitParam(p))
	}
	if !genuine {
		o.LocksError = "unknown: " + v.Refused
	} else if err := h.r.ro(ctx, func(tx *sql.Tx) error {
		if err := h.locks(ctx, tx, d, o, p.loc); err != nil {
			return err
		}
		return h.rates(ctx, tx, d, o, p.loc)
	}); err != nil {
		o.LocksError = h.problem(ctx, err)
	}
	err = h.r.ro(ctx, func(tx *sql.Tx) error {
		if h.r.fenceTable(d) == nil {
			o.FencesAbsent = true
			return nil
		}
		fs, err := h.r.fences(ctx, tx, d, fencesPerPage+1)
		if err != nil {
			return err
		}
		if len(fs) > fencesPerPage {
			fs, o.FencesMore = fs[:fencesPerPage], true
		}
		for _, f := range fs {
			o.Fences = append(o.Fences, fenceRow{Key: clean(f.ID, 300), Token: f.Token})
		}
		return nil
	})
	if err != nil {
		o.FencesError = h.problem(ctx, err)
	}
	return v, nil
}

func limitParam(p params) string {
	if p.limit == 0 {
		return ""
	}
	return strconv.Itoa(p.limit)
}

// problem logs a section's failed read and returns what the page says.
func (h *handler) problem(ctx context.Context, err error) string {
	msg := describe(err, h.s.timeout)
	h.s.logger.LogAttrs(ctx, levelError, "ormlock webui: read failed", attr("error", msg))
	return msg
}

func (h *handler) locks(ctx context.Context, tx *sql.Tx, d lockproto.Dialect, o *overview, loc *time.Location) error {
	now := time.Now()
	for _, k := range h.s.locks {
		hi, err := h.r.holder(ctx, tx, d, k)
		if err != nil {
			return err
		}
		o.Locks = append(o.Locks, holderOf(k, hi, now, loc))
	}
	for _, k := range h.s.leaders {
		hi, err := h.r.holder(ctx, tx, d, k)
		if err != nil {
			return err
		}
		row := leaderRow{holderRow: holderOf(k, hi, now, loc), Token: "-"}
		if hi.Held {
			row.Status, row.StatusClass = "leading", "held"
		} else {
			row.Status = "no leader"
		}
		if row.Epoch != "" { // a lease's term: its epoch is its token
			row.Token = row.Epoch
			o.Leaders = append(o.Leaders, row)
			continue
		}
		tok, ok, err := h.r.token(ctx, tx, d, k)
		if err != nil {
			var mt *missingTableError
			if !errors.As(err, &mt) {
				return err
			}
		}
		if ok {
			row.Token = strconv.FormatInt(tok, 10)
		}
		o.Leaders = append(o.Leaders, row)
	}
	return nil
}

// holderOf shows hi, never its Query: a statement can carry secrets.
func holderOf(k ormlock.Key, hi ormlock.HolderInfo, now time.Time, loc *time.Location) holderRow {
	r := holderRow{Key: clean(k.String(), 300), Lock: clean(hi.Lock, 300), Status: "free", StatusClass: "free", Waiters: hi.Waiters, Mechanism: clean(hi.Mechanism, 16)}
	if !hi.Held {
		return r
	}
	if hi.Epoch > 0 {
		r.Epoch = strconv.FormatInt(hi.Epoch, 10)
	}
	if hi.ExpiresIn > 0 {
		r.ExpiresIn = showDuration(hi.ExpiresIn)
	}
	r.Status, r.StatusClass = "held", "held"
	r.PID = hi.PID
	r.Owner = clean(hi.Owner, 255)
	r.User = clean(hi.User, 128)
	if hi.Application != hi.Owner {
		r.Application = clean(hi.Application, 128)
	}
	r.Client = clean(hi.ClientAddr, 128)
	r.Database = clean(hi.Database, 128)
	r.State = clean(hi.State, 128)
	r.Mode = clean(hi.Mode, 64)
	if hi.StateFor > 0 {
		r.StateFor = showDuration(hi.StateFor)
	}
	if hi.HeldFor > 0 {
		r.HeldFor = showDuration(hi.HeldFor)
		r.Since = showTime(now.Add(-hi.HeldFor), loc)
	}
	return r
}

// lookups is the budget of lock look-ups of a page's stale runs, or nil
// when the server is refused (its locks are not the primary's).
func lookups(genuine bool, budget *int) *int {
	if !genuine {
		return nil
	}
	return budget
}

// jobRow builds a job's strip: its runs and, when its schedule is known,
// the slots without a run since the oldest run shown, newest last; and who
// runs it now (its 'running' runs that are not stale).
func (h *handler) jobRow(p params, name string, runs []ormlock.Run, limit int, now time.Time) jobRow {
	cells := h.cells(p, name, runs, limit, now)
	row := jobRow{Name: clean(name, 200), Href: p.link("job", "name", name), ShownRuns: len(runs)}
	_, row.Scheduled = h.s.schedules[name]
	if len(runs) > 0 {
		row.Last = runStatus(runs[0])
		row.LastAt = showTime(runs[0].Slot, p.loc)
	}
	for _, r := range runs {
		if runStatus(r) != ledger.StatusRunning {
			continue
		}
		if len(row.Now) == maxRunningShown {
			row.NowMore++
			continue
		}
		rn := runningNow{
			Owner: clean(r.Owner, 255),
			For:   showDuration(now.Sub(r.Started)),
			Href:  p.link("job", "name", name) + "#" + cell{run: r}.id(),
		}
		if r.Mechanism == "lease" {
			rn.Lease = " (lease)"
		}
		row.Now = append(row.Now, rn)
	}
	for i := len(cells) - 1; i >= 0; i-- {
		c := cells[i]
		row.Slots = append(row.Slots, slotCell{Class: "s " + c.status, Href: p.link("job", "name", name) + "#" + c.id(), Title: c.title(p.loc)})
		switch c.status {
		case "failed":
			row.Failed++
		case "missed":
			row.Missed++
		}
	}
	row.Cells = len(row.Slots)
	return row
}

// maxRunningShown is how many running runs of a job the overview names.
const maxRunningShown = 3

// cell is one slot of a job: a run, or a missed slot (Run zero but Slot).
type cell struct {
	status string // done, failed, running, stale, missed
	run    ormlock.Run
}

// maxLiveness bounds the lock look-ups of 'running' runs per page (a
// claim-mode run holds its (job, slot) lock for as long as it runs, so a
// 'running' row whose lock is free is stale: reader.runs); the runs past
// it are shown as running.
const maxLiveness = 25

// runStatus is r's status as shown: "stale" for a 'running' run whose lock
// was found free (ormlock.Run.Stale).
func runStatus(r ormlock.Run) string {
	s := statusClass(r.Status)
	if r.Stale && s == ledger.StatusRunning {
		return "stale"
	}
	return s
}

// staleText says what a stale run is, and what becomes of it.
const staleText = "stale: recorded running, but its lock is free, so its owner died or lost the lock before recording the end. " +
	"A later trigger of this slot takes it over (a catch-up run, a retry within the slot); " +
	"a schedule that never fires this slot again (cron without catch-up) leaves it until Prune deletes it"

func (c cell) id() string { return "s" + strconv.FormatInt(c.run.Slot.Unix(), 10) }

func (c cell) title(loc *time.Location) string {
	t := showTime(c.run.Slot, loc)
	s := t.Zone
	if !t.SameZone {
		s += " (" + t.UTC + ")"
	}
	s += ": " + c.status
	switch c.status {
	case "missed":
		return s + " (no run in the ledger)"
	case "stale":
		s += " (left running: its lock is free, so its owner died or lost it)"
	}
	if c.run.Owner != "" {
		s += " by " + clean(c.run.Owner, 80)
	}
	if c.status != "running" && c.status != "stale" {
		s += " in " + showDuration(c.run.Duration)
	}
	if c.run.Error != "" {
		s += ": " + clean(c.run.Error, 120)
	}
	return s
}

// cells merges runs (newest first) with the missed slots of the job's
// schedule, newest first, at most limit of them.
func (h *handler) cells(p params, name string, runs []ormlock.Run, limit int, now time.Time) []cell {
	out := make([]cell, 0, len(runs))
	for _, r := range runs {
		out = append(out, cell{status: runStatus(r), run: r})
	}
	s, ok := h.s.schedules[name]
	if !ok || len(runs) == 0 {
		return out
	}
	current := s.Slot(now)
	oldest := runs[len(runs)-1].Slot
	seen := map[int64]bool{}
	for _, r := range runs {
		seen[r.Slot.UnixMicro()] = true
	}
	for _, t := range scheduleSlots(s, oldest, current, limit) {
		if !seen[t.UnixMicro()] {
			out = append(out, cell{status: "missed", run: ormlock.Run{Slot: t}})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].run.Slot.After(out[j].run.Slot) })
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}

func statusClass(s string) string {
	switch s {
	case ledger.StatusDone, ledger.StatusFailed, ledger.StatusRunning, statusSkipped, statusRerun:
		return s
	}
	return "unknown"
}

func (h *handler) job(ctx context.Context, p params) (*view, error) {
	if p.job == "" {
		return nil, &badRequest{msg: "?name= is missing: the job to show"}
	}
	if err := checkJobParam("?name", p.job, 0); err != nil {
		return nil, err
	}
	limit := p.clampLimit(defaultHistory, maxHistory)
	v := h.base(p, "ormlock: "+clean(p.job, 100), "job", "name", p.job, "limit", limitParam(p))
	v.Self = p.link("job", "name", p.job, "limit", limitParam(p))
	d, genuine, err := h.server(ctx, v)
	if err != nil {
		return nil, err
	}
	if err := checkJobParam("?name", p.job, d); err != nil {
		return nil, err
	}
	j := &jobPage{Name: clean(p.job, 200), Limit: limit}
	_, j.Scheduled = h.s.schedules[p.job]
	v.Job = j
	var runs []ormlock.Run
	err = h.r.ro(ctx, func(tx *sql.Tx) error {
		var err error
		budget := maxLiveness
		runs, err = h.r.runs(ctx, tx, d, p.job, limit, lookups(genuine, &budget))
		return err
	})
	if err != nil {
		j.Error = h.problem(ctx, err)
		return v, nil
	}
	if len(runs) == limit && limit < maxHistory {
		j.More = p.link("job", "name", p.job, "limit", strconv.Itoa(min(limit*2, maxHistory)))
	}
	cells := h.cells(p, p.job, runs, limit, time.Now())
	for _, c := range cells {
		r := c.run
		row := runRow{ID: c.id(), Status: c.status, StatusClass: c.status, Slot: showTime(r.Slot, p.loc), slot: r.Slot}
		if c.status != "missed" {
			row.Owner = clean(r.Owner, 255)
			row.Started = showTime(r.Started, p.loc)
			row.Finished = showTime(r.Finished, p.loc)
			switch c.status {
			case "running":
				row.Duration = "running for " + showDuration(time.Since(r.Started))
			case "stale":
				row.Duration = "left running " + showDuration(time.Since(r.Started)) + " ago"
				row.Error = staleText
			default:
				row.Duration = showDuration(r.Duration)
			}
			if r.Error != "" {
				row.Error = cleanLines(r.Error, 2000)
			}
		}
		j.Runs = append(j.Runs, row)
	}
	j.Plot = newPlot(cells, p.loc)
	j.Control = actorOf(h).control(ctx, d, p.job, p.loc)
	return v, nil
}
