package main

import (
	"net/url"
	"regexp"
	"strings"
)

// hidden replaces every credential redact finds.
const hidden = "xxxxx"

// secretParam matches the names of DSN parameters that carry a credential,
// in URL queries and keyword/value DSNs (pgx: password, sslpassword; libpq
// spellings of the same; a few common ones of other drivers).
var secretParam = regexp.MustCompile(`(?i)^(password|passwd|pwd|pass|sslpassword|secret|token|sslkey)$`)

// kvSecret finds password=value in a keyword/value DSN ("host=db
// password='s e' user=app"): the value unquoted up to a space, or quoted
// with single quotes and backslash escapes, as libpq and pgx accept it.
var kvSecret = regexp.MustCompile(`(?i)\b(password|passwd|pwd|sslpassword)(\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*)`)

// keywordValue tells a keyword/value DSN ("host=... password=...") from a
// MySQL one ("user:pass@tcp(host)/db?param=value").
var keywordValue = regexp.MustCompile(`^\s*[A-Za-z_]+\s*=`)

// redact returns dsn fit for printing, with every credential form the
// drivers accept hidden: URL user info (postgres://user:pass@host) and
// password parameters (?password=..., which pgx accepts), keyword/value DSNs
// (password=... and sslpassword=...), and go-sql-driver/mysql's
// user:pass@tcp(host)/db. A URL that does not parse is not shown at all.
func redact(dsn string) string {
	if strings.Contains(dsn, "://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "(a URL that does not parse; not shown)"
		}
		if u.User != nil {
			if _, ok := u.User.Password(); ok {
				u.User = url.UserPassword(u.User.Username(), hidden)
			}
		}
		if u.RawQuery != "" {
			q, err := url.ParseQuery(u.RawQuery)
			if err != nil {
				u.RawQuery = "(parameters not shown)"
			} else {
				for k := range q {
					if secretParam.MatchString(k) {
						q[k] = []string{hidden}
					}
				}
				u.RawQuery = q.Encode()
			}
		}
		u.Fragment = ""
		return u.String()
	}
	if keywordValue.MatchString(dsn) {
		return kvSecret.ReplaceAllString(dsn, "${1}${2}"+hidden)
	}
	// go-sql-driver/mysql: [user[:password]@][net[(addr)]]/dbname[?params];
	// the user info ends at the last '@' before the last '/'
	head, tail := dsn, ""
	if slash := strings.LastIndex(dsn, "/"); slash >= 0 {
		head, tail = dsn[:slash], dsn[slash:]
	}
	if at := strings.LastIndex(head, "@"); at >= 0 {
		if colon := strings.Index(head[:at], ":"); colon >= 0 {
			head = head[:colon+1] + hidden + head[at:]
		}
	}
	return head + tail
}
