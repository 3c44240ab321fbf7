package webui

import (
	"bytes"
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/ledger"
	"github.com/ormlock/ormlock/internal/lockproto"
)

//go:embed assets/style.css assets/page.html
var assets embed.FS

// ContentSecurityPolicy is the Content-Security-Policy of every response:
// nothing but the view's own stylesheet, no inline style or script, no
// framing, no form.
const ContentSecurityPolicy = "default-src 'none'; style-src 'self'; img-src 'self'; script-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

var (
	pageTmpl = template.Must(template.New("page.html").Funcs(template.FuncMap{
		"add":      func(a, b int) int { return a + b },
		"subtract": func(a, b int) int { return a - b },
		// refreshTag is the meta refresh of n seconds: a number only, so
		// the tag is built here rather than in an attribute html/template
		// treats as unsafe (content).
		"refreshTag": func(n int) template.HTML {
			return template.HTML(`<meta http-equiv="refresh" content="` + strconv.Itoa(n) + `">`)
		},
	}).ParseFS(assets, "assets/page.html"))
	styleCSS = func() []byte {
		b, err := assets.ReadFile("assets/style.css")
		if err != nil {
			panic(err)
		}
		return b
	}()
)

// Handler returns the read-only web view of db's ledger, locks, leaders and
// fence counters (see the package doc). db is the service's own pool; the
// view never closes it, never takes more than a few of its connections at
// once, and bounds every request by WithTimeout. An invalid option is an
// error wrapping ormlock.ErrInvalidArgument (or ormlock.ErrInvalidKey);
// the database is not contacted until the first request.
func Handler(db *sql.DB, opts ...Option) (http.Handler, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: webui.Handler: nil *sql.DB", ormlock.ErrInvalidArgument)
	}
	s, err := newSettings(opts)
	if err != nil {
		return nil, err
	}
	return &handler{s: s, r: newReader(db, s), sem: make(chan struct{}, maxConcurrent)}, nil
}

type handler struct {
	s   *settings
	r   *reader
	sem chan struct{}
}

func (h *handler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", h.s.csp())
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Cache-Control", "no-store")
	if !h.s.hostAllowed(req.Host) {
		refuse(w, req, http.StatusMisdirectedRequest, "ormlock webui: this view does not answer for the host named in the request (see webui.WithAllowedHosts, ormlock ui --allow-host)")
		return
	}
	if h.s.actions != nil && actorOf(h).routeAction(w, req) {
		return
	}
	switch req.Method {
	case http.MethodGet:
	case http.MethodHead:
		// as GET, the same status and headers, without the body (uptime
		// checkers send HEAD)
		w = headWriter{w}
	default:
		hd.Set("Allow", "GET, HEAD")
		refuse(w, req, http.StatusMethodNotAllowed, "ormlock webui: read-only: GET and HEAD only")
		return
	}
	switch req.URL.Path {
	case "", "/":
		h.page(w, req, h.overview)
	case "/job":
		h.page(w, req, h.job)
	case "/static/style.css":
		hd.Set("Content-Type", "text/css; charset=utf-8")
		hd.Set("Cache-Control", "max-age=300")
		_, _ = w.Write(styleCSS)
	default:
		if isAPI(req.URL.Path) {
			h.api(w, req) // the JSON API (api.go)
			return
		}
		plain(w, http.StatusNotFound, "ormlock webui: no such page")
	}
}

// headWriter answers a HEAD request: what a GET would write, headers and
// status (Content-Length included), without the body.
type headWriter struct{ http.ResponseWriter }

func (w headWriter) Write(b []byte) (int, error) { return len(b), nil }

func plain(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(msg + "\n"))
}

// badRequest is a query parameter the page cannot take.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

// page runs build within the request's deadline and one of the view's
// turns at the database, then renders what it returns.
func (h *handler) page(w http.ResponseWriter, req *http.Request, build func(ctx context.Context, p params) (*view, error)) {
	ctx, cancel := context.WithTimeout(req.Context(), h.s.timeout)
	defer cancel()
	p, err := h.params(req.URL.Query())
	if err != nil {
		h.render(w, http.StatusBadRequest, &view{Title: "Bad request", Problem: clean(err.Error(), 500), P: h.defaultParams()})
		return
	}
	select {
	case h.sem <- struct{}{}:
		defer func() { <-h.sem }()
	case <-ctx.Done():
		h.render(w, http.StatusServiceUnavailable, &view{Title: "Busy", Problem: "the view is busy: " + describe(ctx.Err(), h.s.timeout), P: p, Refresh: int(p.refresh / time.Second)})
		return
	}
	v, err := build(ctx, p)
	code := http.StatusOK
	var br *badRequest
	switch {
	case errors.As(err, &br):
		code = http.StatusBadRequest
		v = &view{Title: "Bad request", Problem: clean(br.msg, 500), P: p}
	case err != nil:
		code = http.StatusServiceUnavailable
		msg := describe(err, h.s.timeout)
		h.s.logger.LogAttrs(ctx, levelError, "ormlock webui: read failed", attr("path", req.URL.Path), attr("error", msg))
		// it keeps refreshing, so that a screen left on it recovers
		v = &view{Title: "Unavailable", Problem: msg, P: p, Refresh: int(p.refresh / time.Second)}
	}
	if code == http.StatusOK && ctx.Err() != nil {
		// a section ran out of time: the page is partial
		code = http.StatusServiceUnavailable
	}
	v.P = p
	if h.s.actions != nil && code == http.StatusOK {
		actorOf(h).offerActions(ctx, req, v)
	}
	h.render(w, code, v)
}

func (h *handler) render(w http.ResponseWriter, code int, v *view) {
	v.CSS = "static/style.css"
	if v.Title == "" {
		v.Title = "ormlock"
	}
	writeHTML(w, code, pageTmpl, v)
}

// writeHTML renders t with data and writes it with code, or a plain 500
// when it does not render (nothing of it is written then).
func writeHTML(w http.ResponseWriter, code int, t *template.Template, data any) {
	var buf bytes.Buffer
	if err := t.Execute(&buf, data); err != nil {
		plain(w, http.StatusInternalServerError, "ormlock webui: cannot render the page")
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// The bounds of the query parameters: a value out of range is clamped to
// the nearest bound, one that does not parse is a 400.
const (
	defaultLimit   = 20  // runs per job on the overview
	maxStrip       = 60  // the most runs per job on the overview
	defaultHistory = 50  // runs on a job's page
	maxHistory     = 500 // the most runs on a job's page
	jobsPerPage    = 25
	fencesPerPage  = 100
	defaultRefresh = 30 * time.Second
	minRefresh     = 5 * time.Second
	maxRefresh     = time.Hour
)

// params are a page's query parameters, checked.
type params struct {
	loc     *time.Location
	tz      string // as given, "" for the default
	limit   int    // 0: the page's default
	refresh time.Duration
	after   string // overview: list jobs after this name
	job     string // job page
	raw     url.Values
}

func (h *handler) defaultParams() params {
	return params{loc: h.s.zone, refresh: defaultRefresh, raw: url.Values{}}
}

func (h *handler) params(q url.Values) (params, error) {
	p := h.defaultParams()
	for k, vs := range q {
		if len(vs) > 1 {
			return p, fmt.Errorf("?%s= is given %d times", clean(k, 40), len(vs))
		}
	}
	if tz := q.Get("tz"); tz != "" {
		if len(tz) > 64 || tz == "Local" {
			return p, fmt.Errorf("?tz=%s is not a time zone name (IANA, such as Europe/Berlin, or UTC)", clean(tz, 64))
		}
		loc, err := time.LoadLocation(tz)
		if err != nil {
			return p, fmt.Errorf("?tz=%s is not a time zone name (IANA, such as Europe/Berlin, or UTC)", clean(tz, 64))
		}
		p.loc, p.tz = loc, tz
	}
	if l := q.Get("limit"); l != "" {
		n, ok := wholeNumber(l)
		if !ok {
			return p, fmt.Errorf("?limit=%s is not a whole number", clean(l, 40))
		}
		p.limit = max(n, 1)
	}
	if r := q.Get("refresh"); r != "" {
		n, ok := wholeNumber(r)
		if !ok {
			return p, fmt.Errorf("?refresh=%s is not a whole number of seconds (0 turns refreshing off)", clean(r, 40))
		}
		// clamped to the nearest of 0 (off) and 5 to 3600
		d := time.Duration(min(max(n, 0), int(maxRefresh/time.Second))) * time.Second
		if d > 0 && d < minRefresh {
			d = minRefresh
		}
		p.refresh = d
	}
	p.after, p.job = q.Get("after"), q.Get("name")
	p.raw = url.Values{}
	if p.tz != "" {
		p.raw.Set("tz", p.tz)
	}
	if r := q.Get("refresh"); r != "" {
		p.raw.Set("refresh", strconv.Itoa(int(p.refresh/time.Second)))
	}
	return p, nil
}

// checkJobParam checks a job name given in the URL (?name=, ?after=), not
// empty: any name the ledger can hold, whether RunOnce wrote it or a hand
// did, so that every listed job can be reached and paged past: valid
// UTF-8, at most ledger.MaxJobLen characters, and on PostgreSQL, whose
// text cannot hold one, no NUL byte. Unlike RunOnce's check it takes a
// name that ends with a space (MySQL/MariaDB's job column compares it
// equal to the name without; the ledger holds one of the two at most).
func checkJobParam(param, job string, d lockproto.Dialect) error {
	switch {
	case !utf8.ValidString(job):
		return &badRequest{msg: fmt.Sprintf("%s=%s is not valid UTF-8", param, clean(job, 60))}
	case utf8.RuneCountInString(job) > ledger.MaxJobLen:
		return &badRequest{msg: fmt.Sprintf("%s= is %d characters long: a job name is at most %d", param, utf8.RuneCountInString(job), ledger.MaxJobLen)}
	case d == lockproto.Postgres && strings.ContainsRune(job, 0):
		return &badRequest{msg: fmt.Sprintf("%s=%s has a NUL byte, which no PostgreSQL text holds", param, clean(job, 60))}
	}
	return nil
}

// wholeNumber parses s, a decimal whole number with an optional sign, and
// reports whether it is one; a number beyond int's range is that bound,
// for the caller to clamp as any other.
func wholeNumber(s string) (int, bool) {
	n, err := strconv.Atoi(s)
	if errors.Is(err, strconv.ErrRange) {
		return n, true // math.MaxInt or math.MinInt
	}
	return n, err == nil
}

// Home is the overview's URL with the view's parameters.
func (p params) Home() string { return p.link("") }

// clampLimit returns the page's number of runs: def when none was asked,
// else the one asked within [1, hi].
func (p params) clampLimit(def, hi int) int {
	if p.limit == 0 {
		return def
	}
	return min(p.limit, hi)
}

// link returns the relative URL of page with the view's parameters (zone,
// refresh) and extra, so that a link keeps the reader's choices and can
// be pasted as it is.
func (p params) link(page string, extra ...string) string {
	v := url.Values{}
	for k, vs := range p.raw {
		v[k] = vs
	}
	for i := 0; i+1 < len(extra); i += 2 {
		if extra[i+1] == "" {
			v.Del(extra[i])
		} else {
			v.Set(extra[i], extra[i+1])
		}
	}
	if page == "" {
		page = "./"
	}
	if len(v) == 0 {
		return page
	}
	return page + "?" + v.Encode()
}
