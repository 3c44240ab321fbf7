package webui

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ormlock/ormlock/internal/apiv1"
	"github.com/ormlock/ormlock/internal/lockproto"
)

// The JSON API, version 1 (docs/OPERATIONS.md, API): the view's data
// for scripts and dashboards, under the same handler, with the same host
// check, deadline (WithTimeout), turns at the database and bounds as the
// pages, and read-only as they are. Every answer is a struct of package
// internal/apiv1 written as ASCII-only JSON (application/json, nosniff),
// errors included: {"error": "..."} with the status that says what went
// wrong (400 a bad parameter, 404 no such path, 405 a method other than
// GET or HEAD, 421 a host the view does not answer for, 503 the database
// could not be read in time or refused the read).
//
//	GET /api/v1/jobs?after=NAME&limit=N        the jobs, in name order, each with its newest run
//	GET /api/v1/jobs/{job}/runs?before=T&limit=N   a job's runs, newest first, paged by slot
//	GET /api/v1/runs?job=NAME&before=T&limit=N     the same for any name (".", "..", "a/b")
//	GET /api/v1/holders                         the holders of the WithLocks keys
//	GET /api/v1/leaders                         the leaders of the WithLeaders keys, with tokens
//	GET /api/v1/fences                          the namespace's first fence counters
//	GET /api/v1/controls                        the jobs' controls (paused, schedule)
//	GET /api/v1/actions?job=NAME&limit=N        the actions log, newest first

// apiPrefix is the path of the API's version 1; any path under /api/ is
// the API's (a JSON 404 for an unknown version).
const (
	apiRoot   = "/api/"
	apiPrefix = "/api/" + apiv1.Version + "/"
)

// isAPI reports whether path is the API's.
func isAPI(path string) bool { return strings.HasPrefix(path, apiRoot) || path == "/api" }

// The API's bounds: a limit out of range is clamped, one that does not
// parse is a 400, as on the pages.
const (
	apiJobs          = 25  // jobs per page by default
	apiMaxJobs       = 100 // the most jobs per page
	apiRuns          = 50  // runs per page by default (a job's page's)
	apiMaxRuns       = maxHistory
	apiActions       = 50
	apiMaxActions    = 500
	errNoSuchAPIPath = "ormlock webui: no such API path: the paths are /api/v1/jobs, /api/v1/jobs/{job}/runs, /api/v1/runs?job=, /api/v1/holders, /api/v1/leaders, /api/v1/fences, /api/v1/controls, /api/v1/actions"
)

// apiRequest is an API request, its path and query checked.
type apiRequest struct {
	route  string // jobs, runs, holders, leaders, fences, controls, actions
	job    string // runs: the job; actions: ?job=
	inPath bool   // runs: the job came in the path (jobs/{job}/runs)
	after  string
	before time.Time
	limit  int // 0: the route's default
	q      url.Values
}

// refuse answers a request the view refuses (a host it does not answer
// for, a method it does not take): as JSON when the path is the API's,
// else as text.
func refuse(w http.ResponseWriter, req *http.Request, code int, msg string) {
	if isAPI(req.URL.Path) {
		apiError(w, code, msg)
		return
	}
	plain(w, code, msg)
}

// api answers a GET or HEAD request of the JSON API (ServeHTTP checked
// the host and the method as for the pages: anything but GET and HEAD is
// 405, in JSON; the actions' router, when WithActions turned actions on,
// takes POST /api/v1/actions before that check).
func (h *handler) api(w http.ResponseWriter, req *http.Request) {
	route, job, inPath, found := apiRoute(req.URL.EscapedPath())
	if !found {
		apiError(w, http.StatusNotFound, errNoSuchAPIPath)
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), h.s.timeout)
	defer cancel()
	r, err := h.apiParams(route, job, inPath, req.URL.Query())
	if err != nil {
		apiError(w, http.StatusBadRequest, err.Error())
		return
	}
	select {
	case h.sem <- struct{}{}:
		defer func() { <-h.sem }()
	case <-ctx.Done():
		apiError(w, http.StatusServiceUnavailable, "ormlock webui: the view is busy: "+describe(ctx.Err(), h.s.timeout))
		return
	}
	v, err := h.apiRead(ctx, r)
	var br *badRequest
	switch {
	case errors.As(err, &br):
		apiError(w, http.StatusBadRequest, br.msg)
	case err != nil:
		msg := describe(err, h.s.timeout)
		h.s.logger.LogAttrs(ctx, levelError, "ormlock webui: read failed", attr("path", req.URL.Path), attr("error", msg))
		apiError(w, http.StatusServiceUnavailable, msg)
	default:
		apiJSON(w, http.StatusOK, v)
	}
}

// apiRoute reads the escaped path: the route, and for jobs/{job}/runs the
// job, unescaped; found is false for a path the API does not have.
func apiRoute(escaped string) (route, job string, inPath, found bool) {
	rest, ok := strings.CutPrefix(escaped, apiPrefix)
	if !ok {
		return "", "", false, false
	}
	switch rest {
	case "jobs", "runs", "holders", "leaders", "fences", "controls", "actions":
		return rest, "", false, true
	}
	seg, ok := strings.CutPrefix(rest, "jobs/")
	if !ok {
		return "", "", false, false
	}
	seg, ok = strings.CutSuffix(seg, "/runs")
	if !ok || strings.Contains(seg, "/") {
		return "", "", false, false
	}
	name, err := url.PathUnescape(seg)
	if err != nil {
		return "", "", false, false
	}
	return "runs", name, true, true
}

// apiParams checks the query of route: each parameter at most once,
// limit a whole number (clamped), before RFC 3339, job names as the
// pages take them.
func (h *handler) apiParams(route, job string, inPath bool, q url.Values) (apiRequest, error) {
	r := apiRequest{route: route, job: job, inPath: inPath, q: q}
	for k, vs := range q {
		if len(vs) > 1 {
			return r, &badRequest{msg: "?" + clean(k, 40) + "= is given " + strconv.Itoa(len(vs)) + " times"}
		}
	}
	if l := q.Get("limit"); l != "" {
		n, ok := wholeNumber(l)
		if !ok {
			return r, &badRequest{msg: "?limit=" + clean(l, 40) + " is not a whole number"}
		}
		r.limit = max(n, 1)
	}
	if b := q.Get("before"); b != "" {
		t, err := time.Parse(time.RFC3339Nano, b)
		if err != nil {
			return r, &badRequest{msg: "?before=" + clean(b, 60) + " is not an RFC 3339 time (such as 2026-12-01T02:00:00Z)"}
		}
		r.before = t.UTC()
	}
	r.after = q.Get("after")
	if !inPath {
		r.job = q.Get("job")
	}
	if route == "runs" && r.job == "" {
		return r, &badRequest{msg: "no job: /api/v1/jobs/{job}/runs, or /api/v1/runs?job=NAME"}
	}
	if err := checkJobParam("?after", r.after, 0); err != nil {
		return r, err
	}
	return r, checkJobParam("the job", r.job, 0)
}

// clampLimit is r's limit within [1, hi], def when none was asked.
func (r apiRequest) clampLimit(def, hi int) int {
	if r.limit == 0 {
		return def
	}
	return min(r.limit, hi)
}

// link is the URL of the page of r's route after this one, relative to
// this one's, with the parameters extra (name, value pairs; an empty value
// drops the name) and r's limit when one was asked.
func (r apiRequest) link(extra ...string) string {
	v := url.Values{}
	if r.limit != 0 {
		v.Set("limit", strconv.Itoa(r.limit))
	}
	if r.route == "runs" && !r.inPath {
		v.Set("job", r.job)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		if extra[i+1] != "" {
			v.Set(extra[i], extra[i+1])
		}
	}
	page := "runs"
	if r.route == "jobs" {
		page = "jobs"
	}
	return page + "?" + v.Encode()
}

// runsLink is the URL of job's runs relative to /api/v1/jobs: in the path
// when a path segment carries the name through every router and browser
// (not ".", "..", nor a name with "/", which URL normalisation rewrites),
// else as ?job=.
func runsLink(job string) string {
	if job == "." || job == ".." || strings.Contains(job, "/") {
		return "runs?job=" + url.QueryEscape(job)
	}
	return "jobs/" + url.PathEscape(job) + "/runs"
}

// apiJSON writes v, as apiv1.Marshal does, with status code.
func apiJSON(w http.ResponseWriter, code int, v any) {
	b, err := apiv1.Marshal(v, false)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"ormlock webui: cannot encode the answer"}`+"\n")
	}
	hd := w.Header()
	hd.Set("Content-Type", "application/json")
	hd.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// apiError writes {"error": msg} with status code.
func apiError(w http.ResponseWriter, code int, msg string) {
	apiJSON(w, code, apiv1.Error{Error: msg})
}

// apiServer reads the dialect and checks the server as the pages do:
// refused is why the server's locks are not the primary's ("" when they
// are).
func (h *handler) apiServer(ctx context.Context) (d lockproto.Dialect, refused string, err error) {
	v := &view{}
	d, genuine, err := h.server(ctx, v)
	if err == nil && !genuine {
		refused = v.Refused
	}
	return d, refused, err
}
