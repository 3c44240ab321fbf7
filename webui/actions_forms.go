package webui

import (
	"context"
	"database/sql"
	"embed"
	"html/template"
	"mime"
	"net/http"
	"time"

	"github.com/ormlock/ormlock"
)

//go:embed assets/act.html
var actAssets embed.FS

var actTmpl = template.Must(template.ParseFS(actAssets, "assets/act.html"))

// actPage is what act.html renders: a confirmation page, or what an
// action did. Every string in it that came from the database, the URL or
// the service's author function went through clean.
type actPage struct {
	Title, CSS, Home string
	Author           string
	Problem          string
	What             string
	Effects          []string
	Never            string
	Form             *actFormView
	Done             *actionRow
	Back, BackName   string
}

type actFormView struct {
	Action, Token, Reason, Button, Cancel string
}

// never is what no action does, said on every confirmation page.
const never = "Actions change only ormlock's own tables (the controls table, the ledger, the actions log): none terminates a database session or releases another process's lock — a lock dies with its holder."

// confirm serves GET /act?kind=...: what the action will do, and a form
// that posts it, signed for the author the service names.
func (h actor) confirm(w http.ResponseWriter, req *http.Request) {
	p, err := h.hd.params(req.URL.Query())
	if err != nil {
		h.renderAct(w, http.StatusBadRequest, &actPage{Title: "Bad request", Problem: clean(err.Error(), 500)}, h.hd.defaultParams())
		return
	}
	author, why := h.s.actions.authorOf(req)
	if author == "" {
		h.renderAct(w, http.StatusForbidden, &actPage{Title: "Not allowed", Problem: why}, p)
		return
	}
	in := inputOf(req.URL.Query())
	a, aerr := h.action(in)
	if aerr != nil {
		h.renderAct(w, aerr.code, &actPage{Title: "Bad request", Author: clean(author, maxAuthorLen), Problem: aerr.msg}, p)
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), h.s.timeout)
	err = h.checkJob(ctx, a)
	cancel()
	if err != nil {
		code, msg := h.statusOf(err)
		h.renderAct(w, code, &actPage{Title: actTitle(a), Author: clean(author, maxAuthorLen), Problem: msg}, p)
		return
	}
	pg := &actPage{Title: actTitle(a), Author: clean(author, maxAuthorLen), Effects: effects(a), Never: never}
	if a.Kind == ormlock.ActionResign {
		pg.Effects = append([]string{h.leaderNow(req.Context(), a.Key)}, pg.Effects...)
	}
	pg.What = "Confirm: " + pg.Title + "."
	pg.Back, pg.BackName = h.backTo(p, a)
	pg.Form = &actFormView{
		Action: p.link("act", "kind", string(a.Kind), "job", a.Job, "slot", in.Slot, "key", in.Key),
		Token:  h.s.actions.token(author, time.Now()),
		Reason: clean(in.Reason, maxReasonLen),
		Button: actTitle(a),
		Cancel: pg.Back,
	}
	if pg.Form.Cancel == "" {
		pg.Form.Cancel = p.Home()
	}
	h.renderAct(w, http.StatusOK, pg, p)
}

// actForm serves POST /act: the confirmation page's form. The action is
// in the URL (the page's form action), the CSRF token and the reason in
// the body. It changes nothing unless the request comes from the view's
// own origin, the service's function names an author, and the token was
// made for that author by a key of the view and has not expired.
func (h actor) actForm(w http.ResponseWriter, req *http.Request) {
	p, err := h.hd.params(withoutAction(req.URL.Query()))
	if err != nil {
		p = h.hd.defaultParams()
	}
	if why := crossSite(req); why != "" {
		h.renderAct(w, http.StatusForbidden, &actPage{Title: "Refused", Problem: why + ": nothing was changed"}, p)
		return
	}
	author, why := h.s.actions.authorOf(req)
	if author == "" {
		h.renderAct(w, http.StatusForbidden, &actPage{Title: "Not allowed", Problem: why + ": nothing was changed"}, p)
		return
	}
	if ct, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type")); ct != "application/x-www-form-urlencoded" {
		h.renderAct(w, http.StatusUnsupportedMediaType, &actPage{Title: "Refused", Problem: "the form must be posted as application/x-www-form-urlencoded: nothing was changed"}, p)
		return
	}
	req.Body = http.MaxBytesReader(w, req.Body, maxActionBody)
	if err := req.ParseForm(); err != nil {
		h.renderAct(w, http.StatusBadRequest, &actPage{Title: "Bad request", Problem: "the form cannot be read: " + clean(err.Error(), 200)}, p)
		return
	}
	if why := h.s.actions.checkToken(req.PostForm.Get("csrf"), author, time.Now()); why != "" {
		h.renderAct(w, http.StatusForbidden, &actPage{Title: "Refused", Author: clean(author, maxAuthorLen), Problem: why + ": nothing was changed"}, p)
		return
	}
	in := inputOf(req.URL.Query())
	in.Reason = req.PostForm.Get("reason")
	a, aerr := h.action(in)
	if aerr != nil {
		h.renderAct(w, aerr.code, &actPage{Title: "Bad request", Author: clean(author, maxAuthorLen), Problem: aerr.msg + ": nothing was changed"}, p)
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), h.s.timeout)
	defer cancel()
	rec, err := h.act(ctx, a, author)
	pg := &actPage{Title: actTitle(a), Author: clean(author, maxAuthorLen)}
	pg.Back, pg.BackName = h.backTo(p, a)
	if err != nil {
		code, msg := h.statusOf(err)
		pg.Problem = "Refused: " + msg
		h.renderAct(w, code, pg, p)
		return
	}
	row := actionRowOf(rec, p.loc)
	pg.Done = &row
	h.renderAct(w, http.StatusOK, pg, p)
}

// withoutAction is q without the action's own parameters, for params.
func withoutAction(q map[string][]string) map[string][]string {
	out := map[string][]string{}
	for k, v := range q {
		switch k {
		case "kind", "job", "slot", "key", "reason":
		default:
			out[k] = v
		}
	}
	return out
}

func (h actor) renderAct(w http.ResponseWriter, code int, pg *actPage, p params) {
	pg.CSS, pg.Home = "static/style.css", p.Home()
	writeHTML(w, code, actTmpl, pg)
}

// backTo is the page an action's pages lead back to besides the
// overview: the job's ("" for a leader's).
func (h actor) backTo(p params, a ormlock.Action) (href, name string) {
	if a.Kind == ormlock.ActionResign || a.Job == "" {
		return "", "" // the page's own link to the overview
	}
	return p.link("job", "name", a.Job), "job " + clean(a.Job, 100)
}

func actTitle(a ormlock.Action) string {
	slot := ""
	if !a.Slot.IsZero() {
		slot = " " + a.Slot.UTC().Format(time.RFC3339)
	}
	switch a.Kind {
	case ormlock.ActionPause:
		return "Pause job " + clean(a.Job, 100)
	case ormlock.ActionResume:
		return "Resume job " + clean(a.Job, 100)
	case ormlock.ActionSkip:
		return "Skip slot" + slot + " of job " + clean(a.Job, 100)
	case ormlock.ActionRerun:
		return "Rerun slot" + slot + " of job " + clean(a.Job, 100)
	}
	return "Ask the leader of " + clean(a.Key.String(), 200) + " to resign"
}

// effects says what a does, as docs/OPERATIONS.md does.
func effects(a ormlock.Action) []string {
	logged := "It is recorded in the actions log with your name, the time and the reason."
	switch a.Kind {
	case ormlock.ActionPause:
		return []string{
			"Every replica skips this job's slots from its next firing on (RunOnce, RunScheduled, the scheduler's Locker, Task and JobWrapper), recording each one 'skipped' with your name and reason, until the job is resumed.",
			"A run in progress is not stopped.", logged}
	case ormlock.ActionResume:
		return []string{
			"The job runs again from its next firing.",
			"The slots that fell while it was paused stay 'skipped': catch-up does not run them (rerun one to run it).", logged}
	case ormlock.ActionSkip:
		return []string{
			"The slot is recorded 'skipped' with your reason: no replica runs it, and catch-up never does.",
			"Refused for a slot that is running or done.", logged}
	case ormlock.ActionRerun:
		return []string{
			"The slot is marked 'rerun': the next firing of the job on any replica runs it once, after its own slot.",
			"Refused for a slot that is running or done.", logged}
	}
	return []string{
		"The leader's work is cancelled within one keepalive interval (one renewal interval under leases), with a cause that says it was asked to resign; it releases the lock and stays out of the election for " + ormlock.DefaultResignCooldown.String() + ", and another campaigner takes over.",
		"Refused when nobody leads.", logged}
}

// leaderNow says who leads key now, as the overview's leaders table does.
func (h actor) leaderNow(ctx context.Context, key ormlock.Key) string {
	ctx, cancel := context.WithTimeout(ctx, h.s.timeout)
	defer cancel()
	select {
	case h.sem <- struct{}{}:
		defer func() { <-h.sem }()
	case <-ctx.Done():
		return "Who leads now is unknown: the view is busy."
	}
	d, err := h.r.dialectOf(ctx)
	var hi ormlock.HolderInfo
	if err == nil {
		err = h.r.ro(ctx, func(tx *sql.Tx) error {
			var err error
			hi, err = h.r.holder(ctx, tx, d, key)
			return err
		})
	}
	switch {
	case err != nil:
		return "Who leads now is unknown: " + describe(err, h.s.timeout)
	case !hi.Held:
		return "Nobody leads now: the resign will be refused."
	case hi.Owner == "":
		return "A leader holds the key now (its owner is not known)."
	}
	return "Now led by " + clean(hi.Owner, maxAuthorLen) + ", for " + showDuration(hi.HeldFor) + "."
}
