package webui

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/verbs"
	"github.com/ormlock/ormlock/sqllock"
)

// The paths of the actions (when WithActions turned them on).
const (
	actPath    = "/act"            // GET: the confirmation page; POST: its form
	actAPIPath = "/api/v1/actions" // POST: an action as JSON
)

// routeAction serves req when it is an action's request, and reports
// whether it was: the confirmation page (GET /act), its form (POST /act)
// and the JSON API's action (POST /api/v1/actions). Every other POST is
// answered 405; other requests are the read-only view's.
func (h actor) routeAction(w http.ResponseWriter, req *http.Request) bool {
	switch {
	case req.URL.Path == actPath && (req.Method == http.MethodGet || req.Method == http.MethodHead):
		if req.Method == http.MethodHead {
			w = headWriter{w}
		}
		h.confirm(w, req)
	case req.URL.Path == actPath && req.Method == http.MethodPost:
		h.actForm(w, req)
	case req.URL.Path == actAPIPath && req.Method == http.MethodPost:
		h.actAPI(w, req)
	case req.URL.Path == actPath:
		w.Header().Set("Allow", "GET, HEAD, POST")
		plain(w, http.StatusMethodNotAllowed, "ormlock webui: act takes GET (the confirmation page) and POST (its form)")
	case req.URL.Path == actAPIPath && req.Method != http.MethodGet && req.Method != http.MethodHead:
		// GET /api/v1/actions is the API's read of the actions log
		w.Header().Set("Allow", "GET, HEAD, POST")
		refuse(w, req, http.StatusMethodNotAllowed, "ormlock webui: api/v1/actions takes POST (an action) and GET (the actions log)")
	case req.Method != http.MethodGet && req.Method != http.MethodHead:
		w.Header().Set("Allow", "GET, HEAD")
		refuse(w, req, http.StatusMethodNotAllowed, "ormlock webui: actions are posted to act (the confirmation page's form) or api/v1/actions (JSON) only")
	default:
		return false
	}
	return true
}

// actionInput is an action as a form or the JSON API gives it, unchecked.
type actionInput struct {
	Kind   string `json:"kind"`
	Job    string `json:"job"`
	Slot   string `json:"slot"`
	Key    string `json:"key"`
	Reason string `json:"reason"`
}

func inputOf(v url.Values) actionInput {
	return actionInput{Kind: v.Get("kind"), Job: v.Get("job"), Slot: v.Get("slot"), Key: v.Get("key"), Reason: v.Get("reason")}
}

// actionError is an action refused before it reached the database, or by
// Act: its status code and what the page or the JSON says.
type actionError struct {
	code int
	msg  string
}

func (e *actionError) Error() string { return e.msg }

func refusal(code int, format string, args ...any) *actionError {
	return &actionError{code: code, msg: fmt.Sprintf(format, args...)}
}

// action checks in and returns the action it asks for: a known kind, the
// job (pause, resume, skip, rerun) or a watched leader's key (resign), a
// whole-second slot (skip, rerun) that is a firing of the job's schedule
// when the view knows it (WithSchedule), a reason of at most 1000
// characters.
func (h actor) action(in actionInput) (ormlock.Action, *actionError) {
	var a ormlock.Action
	for _, f := range []struct{ name, v string }{{"kind", in.Kind}, {"job", in.Job}, {"slot", in.Slot}, {"key", in.Key}, {"reason", in.Reason}} {
		if !utf8.ValidString(f.v) {
			return a, refusal(http.StatusBadRequest, "%s is not valid UTF-8", f.name)
		}
	}
	if n := utf8.RuneCountInString(in.Reason); n > maxReasonLen {
		return a, refusal(http.StatusBadRequest, "the reason is %d characters long, at most %d", n, maxReasonLen)
	}
	kind := ormlock.ActionKind(in.Kind)
	switch kind {
	case ormlock.ActionPause, ormlock.ActionResume, ormlock.ActionSkip, ormlock.ActionRerun:
		if in.Job == "" {
			return a, refusal(http.StatusBadRequest, "%s needs the job", kind)
		}
		if err := checkJobParam("job", in.Job, 0); err != nil {
			return a, refusal(http.StatusBadRequest, "%s", err.Error())
		}
		if in.Key != "" {
			return a, refusal(http.StatusBadRequest, "%s takes no key (only resign does)", kind)
		}
	case ormlock.ActionResign:
		if in.Job != "" || in.Slot != "" {
			return a, refusal(http.StatusBadRequest, "resign takes a key, not a job or slot")
		}
		for _, k := range h.s.leaders {
			if k.String() == in.Key {
				return ormlock.Resign(k).By("", in.Reason), nil
			}
		}
		return a, refusal(http.StatusBadRequest, "key %q is not a leader key this view watches (webui.WithLeaders, ormlock ui --leader)", clean(in.Key, 200))
	default:
		return a, refusal(http.StatusBadRequest, "kind %q is not an action: pause, resume, skip, rerun or resign", clean(in.Kind, 40))
	}
	a = ormlock.Action{Kind: kind, Job: in.Job, Reason: in.Reason}
	switch kind {
	case ormlock.ActionSkip, ormlock.ActionRerun:
		slot, err := time.Parse(time.RFC3339, in.Slot)
		switch {
		case in.Slot == "":
			return a, refusal(http.StatusBadRequest, "%s needs the slot (RFC 3339, such as 2026-01-02T00:00:00Z)", kind)
		case err != nil:
			return a, refusal(http.StatusBadRequest, "slot %q is not an RFC 3339 time (such as 2026-01-02T00:00:00Z)", clean(in.Slot, 60))
		case !slot.Truncate(time.Second).Equal(slot):
			return a, refusal(http.StatusBadRequest, "slot %s is not a whole second: no schedule fires there", clean(in.Slot, 60))
		}
		if s, ok := h.s.schedules[in.Job]; ok && !s.Slot(slot).Equal(slot) {
			return a, refusal(http.StatusBadRequest, "slot %s is not a firing of job %q's schedule (its slot is %s)", slot.UTC().Format(time.RFC3339), clean(in.Job, 100), s.Slot(slot).UTC().Format(time.RFC3339))
		}
		a.Slot = slot.UTC()
	default:
		if in.Slot != "" {
			return a, refusal(http.StatusBadRequest, "%s takes no slot (only skip and rerun do)", kind)
		}
	}
	return a, nil
}

// knownJob refuses a job the view knows nothing of: none of its runs in
// the ledger, no row in the controls table (a replica's RunScheduled
// writes one) and no schedule given with WithSchedule — a typo that would
// pause or skip nothing.
func (h actor) knownJob(ctx context.Context, job string) error {
	if _, ok := h.s.schedules[job]; ok {
		return nil
	}
	d, err := h.r.dialectOf(ctx)
	if err != nil {
		return err
	}
	if err := checkJobParam("job", job, d); err != nil {
		return refusal(http.StatusBadRequest, "%s", err.Error())
	}
	known := false
	err = h.r.ro(ctx, func(tx *sql.Tx) error {
		runs, err := h.r.runs(ctx, tx, d, job, 1, nil)
		if err != nil || len(runs) > 0 {
			known = len(runs) > 0
			return err
		}
		cs, err := verbs.Controls(ctx, binder{h.r, d, tx}, "webui", nil)
		for _, c := range cs {
			known = known || c.Job == job
		}
		return err
	})
	if err != nil || known {
		return err
	}
	return refusal(http.StatusNotFound, "job %q is unknown here: no run in the ledger, no control row, no schedule given to the view", clean(job, 100))
}

// checkJob runs knownJob for a job's action within one of the view's
// turns at the database.
func (h actor) checkJob(ctx context.Context, a ormlock.Action) error {
	if a.Kind == ormlock.ActionResign {
		return nil
	}
	select {
	case h.sem <- struct{}{}:
		defer func() { <-h.sem }()
	case <-ctx.Done():
		return refusal(http.StatusServiceUnavailable, "the view is busy: %s", describe(ctx.Err(), h.s.timeout))
	}
	return h.knownJob(ctx, a.Job)
}

// act carries a out for author within the request's deadline and one of
// the view's turns at the database: the checks of knownJob, then the
// adapters' Act, which checks and records it (sqllock.Act).
func (h actor) act(ctx context.Context, a ormlock.Action, author string) (ormlock.ActionRecord, error) {
	if err := h.checkJob(ctx, a); err != nil {
		return ormlock.ActionRecord{}, err
	}
	select {
	case h.sem <- struct{}{}:
		defer func() { <-h.sem }()
	case <-ctx.Done():
		return ormlock.ActionRecord{}, refusal(http.StatusServiceUnavailable, "the view is busy: %s", describe(ctx.Err(), h.s.timeout))
	}
	rec, err := sqllock.Act(ctx, h.r.db, a.By(author, a.Reason), h.verbOptions()...)
	if err != nil {
		h.s.logger.LogAttrs(ctx, levelError, "ormlock webui: action refused", attr("kind", string(a.Kind)), attr("author", clean(author, maxAuthorLen)), attr("error", describe(err, h.s.timeout)))
		return rec, err
	}
	h.s.logger.LogAttrs(ctx, levelInfo, "ormlock webui: action", attr("kind", string(a.Kind)), attr("job", clean(a.Job, 200)), attr("key", clean(rec.Key, 200)), attr("author", clean(author, maxAuthorLen)), attr("outcome", clean(rec.Outcome, 300)))
	return rec, nil
}

// statusOf is the status code and text of a failed action.
func (h actor) statusOf(err error) (int, string) {
	var ae *actionError
	switch {
	case errors.As(err, &ae):
		return ae.code, ae.msg
	case lockproto.IsMissingTable(err):
		return http.StatusServiceUnavailable, "the actions' tables do not exist: run Migrate (ormlock migrate) of this version, from every replica's start-up or once: " + describe(err, h.s.timeout)
	case errors.Is(err, ormlock.ErrInvalidArgument), errors.Is(err, ormlock.ErrInvalidKey):
		// Act refused it: a running or done slot, no leader, not a firing
		return http.StatusBadRequest, clean(strings.TrimPrefix(err.Error(), "ormlock: "), 500)
	}
	return http.StatusServiceUnavailable, describe(err, h.s.timeout)
}
