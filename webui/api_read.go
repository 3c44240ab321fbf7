package webui

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/apiv1"
	"github.com/ormlock/ormlock/internal/ledger"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/verbs"
)

// apiRead reads the answer of r.
func (h *handler) apiRead(ctx context.Context, r apiRequest) (any, error) {
	d, refused, err := h.apiServer(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkJobParam("the job", r.job, d); err != nil {
		return nil, err
	}
	if err := checkJobParam("?after", r.after, d); err != nil {
		return nil, err
	}
	read := map[string]func(context.Context, apiRequest, lockproto.Dialect, string) (any, error){
		"jobs": h.apiJobs, "runs": h.apiRuns, "holders": h.apiHolders, "leaders": h.apiLeaders,
		"fences": h.apiFences, "controls": h.apiControls, "actions": h.apiActions,
	}[r.route]
	return read(ctx, r, d, refused)
}

// errRefused is the error of a read of holders on a server whose locks
// are not the primary's.
func errRefused(refused string) error {
	return errors.New("the server's locks cannot be read: " + refused)
}

func (h *handler) apiJobs(ctx context.Context, r apiRequest, d lockproto.Dialect, refused string) (any, error) {
	n := r.clampLimit(apiJobs, apiMaxJobs)
	out := apiv1.JobList{Namespace: h.s.namespace, Jobs: []apiv1.Job{}}
	err := h.r.ro(ctx, func(tx *sql.Tx) error {
		names, err := h.r.jobs(ctx, tx, d, r.after, n+1)
		if err != nil {
			return err
		}
		if len(names) > n {
			names = names[:n]
			out.NextAfter = names[n-1]
			out.Next = r.link("after", out.NextAfter)
		}
		budget := maxLiveness
		for _, name := range names {
			runs, err := h.r.runs(ctx, tx, d, name, 1, lookups(refused == "", &budget))
			if err != nil {
				return err
			}
			j := apiv1.Job{Name: name, Runs: runsLink(name)}
			if len(runs) > 0 {
				last := apiv1.RunOf(runs[0])
				j.LastRun = &last
			}
			out.Jobs = append(out.Jobs, j)
		}
		return nil
	})
	return out, err
}

func (h *handler) apiRuns(ctx context.Context, r apiRequest, d lockproto.Dialect, refused string) (any, error) {
	n := r.clampLimit(apiRuns, apiMaxRuns)
	t, err := ledger.NewTable(d, h.s.ledger)
	if err != nil {
		return nil, err
	}
	out := apiv1.RunList{Job: r.job}
	err = h.r.ro(ctx, func(tx *sql.Tx) error {
		var rs []ledger.Row
		var err error
		if r.before.IsZero() {
			rs, err = t.Runs(ctx, tx, h.s.namespace, r.job, n)
		} else {
			rs, err = t.RunsBefore(ctx, tx, h.s.namespace, r.job, r.before, n)
		}
		if err == nil && refused == "" {
			_, err = t.MarkStale(ctx, tx, nil, h.r.cfg(), rs, maxLiveness)
		}
		if err != nil {
			return h.r.tableError(err, h.s.ledger, "read runs")
		}
		out.Runs = apiv1.RunsOf(rs)
		if len(rs) == n {
			oldest := rs[n-1].Slot.UTC()
			out.NextBefore = &oldest
			out.Next = r.link("before", oldest.Format(time.RFC3339Nano))
		}
		return nil
	})
	return out, err
}

func (h *handler) apiHolders(ctx context.Context, _ apiRequest, d lockproto.Dialect, refused string) (any, error) {
	if refused != "" {
		return nil, errRefused(refused)
	}
	out := apiv1.HolderList{Holders: []apiv1.Holder{}}
	err := h.r.ro(ctx, func(tx *sql.Tx) error {
		for _, k := range h.s.locks {
			hi, err := h.r.holder(ctx, tx, d, k)
			if err != nil {
				return err
			}
			out.Holders = append(out.Holders, apiv1.HolderOf(k.String(), hi))
		}
		return nil
	})
	return out, err
}

func (h *handler) apiLeaders(ctx context.Context, _ apiRequest, d lockproto.Dialect, refused string) (any, error) {
	if refused != "" {
		return nil, errRefused(refused)
	}
	out := apiv1.LeaderList{Leaders: []apiv1.Leader{}}
	err := h.r.ro(ctx, func(tx *sql.Tx) error {
		for _, k := range h.s.leaders {
			l, err := h.leader(ctx, tx, d, k)
			if err != nil {
				return err
			}
			out.Leaders = append(out.Leaders, l)
		}
		return nil
	})
	return out, err
}

// leader reads the holder of k and its latest fencing token: a lease's
// epoch, else the fence table's counter (none when the table is missing).
func (h *handler) leader(ctx context.Context, tx *sql.Tx, d lockproto.Dialect, k ormlock.Key) (apiv1.Leader, error) {
	hi, err := h.r.holder(ctx, tx, d, k)
	if err != nil {
		return apiv1.Leader{}, err
	}
	l := apiv1.Leader{Holder: apiv1.HolderOf(k.String(), hi)}
	if hi.Held && hi.Epoch > 0 {
		tok := hi.Epoch
		l.Token = &tok
		return l, nil
	}
	tok, ok, err := h.r.token(ctx, tx, d, k)
	var mt *missingTableError
	if err != nil && !errors.As(err, &mt) {
		return l, err
	}
	if ok {
		l.Token = &tok
	}
	return l, nil
}

func (h *handler) apiFences(ctx context.Context, _ apiRequest, d lockproto.Dialect, _ string) (any, error) {
	out := apiv1.FenceList{Namespace: h.s.namespace, Fences: []apiv1.Fence{}}
	err := h.r.ro(ctx, func(tx *sql.Tx) error {
		fs, err := h.r.fences(ctx, tx, d, fencesPerPage+1)
		if err != nil {
			return err
		}
		if len(fs) > fencesPerPage {
			fs, out.Truncated = fs[:fencesPerPage], true
		}
		for _, f := range fs {
			out.Fences = append(out.Fences, apiv1.Fence{Key: f.ID, Token: f.Token})
		}
		return nil
	})
	return out, err
}

func (h *handler) apiControls(ctx context.Context, _ apiRequest, d lockproto.Dialect, _ string) (any, error) {
	var out apiv1.ControlList
	err := h.r.ro(ctx, func(tx *sql.Tx) error {
		cs, err := verbs.Controls(ctx, binder{h.r, d, tx}, "webui", nil)
		if err != nil {
			return h.r.tableError(err, h.s.ledger+"_controls", "read the jobs' controls")
		}
		out.Controls = apiv1.ControlsOf(cs)
		return nil
	})
	return out, err
}

func (h *handler) apiActions(ctx context.Context, r apiRequest, d lockproto.Dialect, _ string) (any, error) {
	var out apiv1.ActionList
	err := h.r.ro(ctx, func(tx *sql.Tx) error {
		as, err := verbs.Actions(ctx, binder{h.r, d, tx}, "webui", r.job, r.clampLimit(apiActions, apiMaxActions), nil)
		if err != nil {
			return h.r.tableError(err, h.s.ledger+"_actions", "read the actions log")
		}
		out.Actions = apiv1.ActionsOf(as)
		return nil
	})
	return out, err
}
