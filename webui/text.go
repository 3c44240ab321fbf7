package webui

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/lockproto"
)

// Every value a page shows that comes from the database or the URL (job
// names, owners, error texts, application names, keys) goes through clean
// before the template sees it, and html/template then escapes it for its
// context (text, attribute, URL). clean makes visible what would otherwise
// act unseen: control characters, and the bidirectional and other format
// characters (U+202E RIGHT-TO-LEFT OVERRIDE, U+2066..U+2069, zero-width
// characters), which could make "gnp.exe" read as "exe.png" or reorder a
// table cell, become \u202E and the like; invalid UTF-8 becomes U+FFFD.

// clean returns s on one line with every control and format character
// written as a \uXXXX escape, at most limit bytes (cut at a character
// boundary and marked "…"; all of it when limit <= 0).
func clean(s string, limit int) string { return cleanText(s, limit, false) }

// cleanLines is clean keeping newlines (error texts, shown pre-wrapped).
func cleanLines(s string, limit int) string { return cleanText(s, limit, true) }

func cleanText(s string, limit int, lines bool) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		if limit > 0 && b.Len() >= limit {
			b.WriteString("…")
			break
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteRune(utf8.RuneError)
		case r == '\n' && lines:
			b.WriteByte('\n')
		case r == '\t':
			b.WriteString("    ")
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029' || unicode.Is(unicode.Co, r):
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// shownTime is one instant as a page shows it: in the chosen zone, in UTC,
// and as an RFC 3339 attribute.
type shownTime struct {
	Zone, UTC, ISO string
	SameZone       bool // the chosen zone is UTC: show it once
}

func showTime(t time.Time, loc *time.Location) shownTime {
	if t.IsZero() {
		return shownTime{}
	}
	const layout = "2006-01-02 15:04:05"
	z := t.In(loc)
	name, _ := z.Zone()
	return shownTime{
		Zone:     z.Format(layout) + " " + name,
		UTC:      t.UTC().Format(layout) + " UTC",
		ISO:      t.UTC().Format(time.RFC3339),
		SameZone: loc == time.UTC || z.Format(layout) == t.UTC().Format(layout) && name == "UTC",
	}
}

// showDuration rounds d for reading: milliseconds under a minute, seconds
// above.
func showDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Microsecond * 100).String()
	case d < time.Minute:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// describe returns what a page and the log say of a failed read: the
// server's own error text when the server answered (it names no DSN), and
// otherwise only what happened, never the driver's text, which for a
// failed connection names the host, the user and the database.
func describe(err error, timeout time.Duration) string {
	var mt *missingTableError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, context.DeadlineExceeded):
		return "the database did not answer within " + timeout.String() + " (the request's deadline)"
	case errors.Is(err, context.Canceled):
		return "the request was cancelled"
	case errors.As(err, &mt):
		return mt.Error()
	case errors.Is(err, ormlock.ErrUnsupportedDialect), errors.Is(err, ormlock.ErrInvalidArgument), errors.Is(err, ormlock.ErrInvalidKey):
		return err.Error() // the library's own text
	case errors.Is(err, errUnknownServer):
		return err.Error()
	case lockproto.SQLState(err) != "":
		return "the server refused the read: " + serverText(err) + " (SQLSTATE " + lockproto.SQLState(err) + ")"
	case lockproto.MySQLErrno(err) != 0:
		return "the server refused the read: " + serverText(err) + " (error " + strconv.Itoa(lockproto.MySQLErrno(err)) + ")"
	}
	return "cannot reach the database server"
}

// serverText is the message of the server's error in err's chain: the
// innermost error's text (the driver's rendering of the server's message).
func serverText(err error) string {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return clean(err.Error(), 500)
		}
		err = u
	}
}
