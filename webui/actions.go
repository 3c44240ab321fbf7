package webui

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// ActionOption configures [WithActions].
type ActionOption func(*actionSettings)

// Bounds of what an action carries.
const (
	// MinCSRFKeyLen is the shortest key WithCSRFKey takes, in bytes.
	MinCSRFKeyLen = 32
	// maxAuthorLen is the longest author the service's function may
	// return, in characters (the actions log's author column).
	maxAuthorLen = 255
	// maxReasonLen is the longest reason the view takes, in characters.
	maxReasonLen = 1000
	// maxActionBody bounds a POST's body (the form or the JSON).
	maxActionBody = 16 << 10
	// ActionHeader is the header every POST to /api/v1/actions must carry
	// (any non-empty value): no cross-site form can send a custom header,
	// and a cross-site script cannot either without a CORS preflight, which
	// the view never answers.
	ActionHeader = "X-Ormlock-Action"
	// ActionsContentSecurityPolicy is the Content-Security-Policy of every
	// response when actions are on: [ContentSecurityPolicy] with forms
	// allowed to post to the view itself (form-action 'self').
	ActionsContentSecurityPolicy = "default-src 'none'; style-src 'self'; img-src 'self'; script-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)

type actionSettings struct {
	author   func(*http.Request) (string, error)
	key      []byte
	shared   bool // the key was given (WithCSRFKey), not drawn for this process
	tokenTTL time.Duration
	err      error
}

func (a *actionSettings) fail(format string, args ...any) {
	if a.err == nil {
		a.err = fmt.Errorf(format, args...)
	}
}

// WithActions turns the view's actions on: pause and resume a job, skip
// or rerun one of its slots, ask a leader to resign — from POST forms
// behind a confirmation page, and from POST /api/v1/actions (see the
// package doc, "Actions"). author names who acts for each request: the
// embedding service's own authentication, read from the request (a
// session, a client certificate, a header its proxy sets). A request it
// refuses (an error, or "") changes nothing and is answered 403; the
// author it returns must be valid UTF-8 of at most 255 characters. The
// view never invents an author. The default is no actions: the view is
// read-only, and answers every POST 405.
func WithActions(author func(*http.Request) (string, error), opts ...ActionOption) Option {
	return func(s *settings) {
		if author == nil {
			s.fail("WithActions: nil author function")
			return
		}
		a := &actionSettings{author: author, tokenTTL: defaultTokenTTL}
		for _, o := range opts {
			if o != nil {
				o(a)
			}
		}
		if a.err != nil {
			s.fail("WithActions: %v", a.err)
			return
		}
		if a.key == nil {
			a.key = make([]byte, MinCSRFKeyLen)
			if _, err := rand.Read(a.key); err != nil {
				s.fail("WithActions: draw a CSRF key: %v", err)
				return
			}
		}
		s.actions = a
	}
}

// defaultTokenTTL is how long a confirmation page's form stays valid.
const defaultTokenTTL = time.Hour

// WithCSRFKey is the secret the view's forms' CSRF tokens are signed with
// (HMAC-SHA256), at least MinCSRFKeyLen bytes: give every replica of the
// service the same key, so that a form shown by one replica may be posted
// to another. The default is a random key drawn when the handler is made:
// a form then posts back only to the process that showed it (a load
// balancer must keep a client on one replica, or the post is refused as a
// stale form and the operator confirms again).
func WithCSRFKey(key []byte) ActionOption {
	return func(a *actionSettings) {
		if len(key) < MinCSRFKeyLen {
			a.fail("WithCSRFKey: the key is %d bytes, at least %d are needed", len(key), MinCSRFKeyLen)
			return
		}
		a.key, a.shared = append([]byte(nil), key...), true
	}
}

// WithTokenTTL is how long a confirmation page's form may be posted after
// it was shown, at least a minute. The default is 1h.
func WithTokenTTL(d time.Duration) ActionOption {
	return func(a *actionSettings) {
		if d < time.Minute {
			a.fail("WithTokenTTL: %v is shorter than a minute", d)
			return
		}
		a.tokenTTL = d
	}
}

// A CSRF token is "v1.EXPIRY.MAC": EXPIRY the Unix second after which it
// is refused, MAC the HMAC-SHA256, under the key, of the author and the
// expiry (base64url). It binds a form to the author the service's function
// named when the page was shown, so that a token shown to one operator is
// refused for another, and a post whose author function now refuses, or
// names someone else, changes nothing.
const tokenPrefix = "v1."

func (a *actionSettings) mac(author string, expiry int64) []byte {
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte("ormlock webui csrf v1\x00"))
	m.Write([]byte(author))
	m.Write([]byte{0})
	m.Write([]byte(strconv.FormatInt(expiry, 10)))
	return m.Sum(nil)
}

// token returns a form's CSRF token for author, valid until now + TTL.
func (a *actionSettings) token(author string, now time.Time) string {
	exp := now.Add(a.tokenTTL).Unix()
	return tokenPrefix + strconv.FormatInt(exp, 10) + "." + base64.RawURLEncoding.EncodeToString(a.mac(author, exp))
}

// checkToken reports why tok is not a valid token for author at now, or
// "" when it is.
func (a *actionSettings) checkToken(tok, author string, now time.Time) string {
	if tok == "" {
		return "the form carries no CSRF token"
	}
	rest, ok := strings.CutPrefix(tok, tokenPrefix)
	exps, macs, ok2 := strings.Cut(rest, ".")
	exp, err := strconv.ParseInt(exps, 10, 64)
	mac, err2 := base64.RawURLEncoding.DecodeString(macs)
	if !ok || !ok2 || err != nil || err2 != nil {
		return "the form's CSRF token is malformed"
	}
	if !hmac.Equal(mac, a.mac(author, exp)) {
		return "the form's CSRF token is not valid for " + strconv.Quote(clean(author, 80)) + " (forged, made for another author, or made by a replica with another key: see webui.WithCSRFKey)"
	}
	if now.Unix() > exp {
		return "the form has expired: open the confirmation page again"
	}
	return ""
}

// authorOf asks the service's function who sends req; "" and the reason
// when it refuses.
func (a *actionSettings) authorOf(req *http.Request) (string, string) {
	who, err := a.author(req)
	switch {
	case err != nil:
		return "", "the service refused this request: " + clean(err.Error(), 300)
	case who == "":
		return "", "the service names no author for this request"
	case !utf8.ValidString(who):
		return "", "the service's author is not valid UTF-8"
	case utf8.RuneCountInString(who) > maxAuthorLen:
		return "", fmt.Sprintf("the service's author is %d characters long, at most %d", utf8.RuneCountInString(who), maxAuthorLen)
	}
	return who, ""
}

// crossSite reports why req, a POST, does not come from the view's own
// pages, or "". A browser names the site that sent a request in
// Sec-Fetch-Site, which decides when present: only same-origin passes
// (the view's own form). Without it (an older browser, a script), an
// Origin header must name the view's host; an opaque one ("null") is
// refused. (With the view's Referrer-Policy, no-referrer, a browser sends
// "Origin: null" on the view's own form posts, so Origin cannot decide
// where Sec-Fetch-Site is sent.) A request with neither is judged by its
// token alone (forms) or its custom header (the API).
func crossSite(req *http.Request) string {
	if site := req.Header.Get("Sec-Fetch-Site"); site != "" {
		if site != "same-origin" {
			return "the request came from another site (Sec-Fetch-Site: " + clean(site, 40) + ")"
		}
		return ""
	}
	origin := req.Header.Get("Origin")
	if origin == "" {
		return ""
	}
	u, err := url.Parse(origin)
	if origin == "null" || err != nil || u.Host == "" {
		return "the request came from an opaque origin (Origin: " + clean(origin, 100) + ")"
	}
	if !strings.EqualFold(u.Host, req.Host) {
		return "the request came from another origin (Origin: " + clean(origin, 100) + ", this view: " + clean(req.Host, 100) + ")"
	}
	return ""
}
