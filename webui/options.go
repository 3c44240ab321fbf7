package webui

import (
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/ledger"
)

// Option configures [Handler].
type Option func(*settings)

// Limits of what one page reads and shows.
const (
	// MaxWatched is the most keys WithLocks and WithLeaders together may
	// name: each is one lookup per page.
	MaxWatched = 100
	// maxConcurrent is how many pages read the database at once; others
	// wait for a turn within their deadline, so the view never takes more
	// than that many connections of the service's pool.
	maxConcurrent = 4
)

type settings struct {
	namespace string
	ledger    string
	schedules map[string]ormlock.Schedule
	locks     []ormlock.Key
	leaders   []ormlock.Key
	rates     []ormlock.Key
	rateTable string
	refusals  *Refusals
	hosts     []string
	zone      *time.Location
	timeout   time.Duration
	logger    *slog.Logger
	actions   *actionSettings // nil: read-only (WithActions)
	err       error
}

func (s *settings) fail(format string, args ...any) {
	if s.err == nil {
		s.err = fmt.Errorf("%w: webui: "+format, append([]any{ormlock.ErrInvalidArgument}, args...)...)
	}
}

// WithNamespace shows the runs, locks and fence counters of namespace ns,
// as [ormlock.WithNamespace] names it for the verbs. The default is none.
func WithNamespace(ns string) Option {
	return func(s *settings) {
		if err := config.New(ormlock.WithNamespace(ns)).Err(); err != nil && s.err == nil {
			s.err = fmt.Errorf("webui: %w", err)
		}
		s.namespace = ns
	}
}

// WithLedgerTable reads the ledger table name (and its fence table, name +
// "_fence"), as [ormlock.WithLedgerTable] names it. The default is
// "ormlock_runs".
func WithLedgerTable(name string) Option {
	return func(s *settings) {
		if err := config.ValidIdentifier("ledger table name", name); err != nil && s.err == nil {
			s.err = fmt.Errorf("webui: %w", err)
		}
		s.ledger = name
	}
}

// WithSchedule tells the view job's schedule, so that its strip and
// history show the slots that have no run (missed) between its runs and
// now. sched must be made by [ormlock.Cron] or [ormlock.Every]. The
// default is no schedule: only the runs in the ledger are shown.
func WithSchedule(job string, sched ormlock.Schedule) Option {
	return func(s *settings) {
		if err := ledger.ValidateJob("webui.WithSchedule", job); err != nil {
			if s.err == nil {
				s.err = err
			}
			return
		}
		if !enumerable(sched) {
			s.fail("WithSchedule(%q): the schedule must be made by ormlock.Cron or ormlock.Every (got %T)", job, sched)
			return
		}
		if s.schedules == nil {
			s.schedules = map[string]ormlock.Schedule{}
		}
		s.schedules[job] = sched
	}
}

// WithLocks names the locks whose holders the view shows: on PostgreSQL
// advisory keys are hashes, so the view cannot list the names of the locks
// held, only look up the keys it is told (in the namespace of
// WithNamespace); on MySQL/MariaDB likewise by name. The default is none.
func WithLocks(keys ...ormlock.Key) Option {
	return func(s *settings) { s.locks = append(s.locks, keys...) }
}

// WithLeaders names the keys of Lead campaigns whose leader the view
// shows, with its owner, how long it has held the lock and the latest
// fencing token of the key. The default is none.
func WithLeaders(keys ...ormlock.Key) Option {
	return func(s *settings) { s.leaders = append(s.leaders, keys...) }
}

// WithRates names the rate limits ([ormlock.Rate] keys) whose tokens the
// view shows: n and per, the tokens used within the last per by
// transactions that committed, the free ones, when the next used one is
// free again (by the database server's clock), and, with WithRefusals,
// how many takes this process saw refused. They count among MaxWatched.
// The default is none.
func WithRates(keys ...ormlock.Key) Option {
	return func(s *settings) { s.rates = append(s.rates, keys...) }
}

// WithRateTable reads the rate limits' token table name, as
// [ormlock.WithRateTable] names it. The default is "ormlock_rate_tokens".
func WithRateTable(name string) Option {
	return func(s *settings) {
		if err := config.ValidIdentifier("WithRateTable: table name", name); err != nil {
			s.fail("%v", err)
			return
		}
		s.rateTable = name
	}
}

// WithRefusals shows r's counts of refusals by key beside the keys of
// WithRates: r must also be the verbs' observer ([Refusals]). The default
// is none (the column shows "-").
func WithRefusals(r *Refusals) Option {
	return func(s *settings) { s.refusals = r }
}

// WithAllowedHosts adds host names (or host:port) to those the view
// answers for: a request whose Host header is not among them gets 421
// Misdirected Request, which defeats DNS rebinding (a hostile page whose
// name resolves to the view's address). The default allows only the
// loopback names localhost, 127.0.0.1 and [::1], on any port; a view
// reached by another name must be given that name.
func WithAllowedHosts(hosts ...string) Option {
	return func(s *settings) {
		for _, h := range hosts {
			h = strings.ToLower(strings.TrimSpace(h))
			if h == "" || strings.ContainsAny(h, "/ \t") {
				s.fail("WithAllowedHosts: %q is not a host name", h)
				continue
			}
			s.hosts = append(s.hosts, h)
		}
	}
}

// WithTimeZone is the zone times are shown in (besides UTC) when the URL
// names none (?tz=Area/City chooses another). The default is UTC.
func WithTimeZone(loc *time.Location) Option {
	return func(s *settings) {
		if loc == nil {
			s.fail("WithTimeZone: nil location")
			return
		}
		s.zone = loc
	}
}

// WithTimeout bounds the work of one request, database reads included: a
// page that has not been read by then is answered 503. The default is 5s.
func WithTimeout(d time.Duration) Option {
	return func(s *settings) {
		if d <= 0 {
			s.fail("WithTimeout: must be positive, got %v", d)
			return
		}
		s.timeout = d
	}
}

// WithLogger receives the errors the view meets (database errors, as the
// page shows them: never a DSN or a password). The default is
// slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(s *settings) {
		if l == nil {
			s.fail("WithLogger: nil logger")
			return
		}
		s.logger = l
	}
}

func newSettings(opts []Option) (*settings, error) {
	s := &settings{ledger: config.DefaultLedgerTable, rateTable: config.DefaultRateTable, zone: time.UTC, timeout: 5 * time.Second}
	for _, o := range opts {
		if o != nil {
			o(s)
		}
	}
	if s.err != nil {
		return nil, s.err
	}
	if n := len(s.locks) + len(s.leaders) + len(s.rates); n > MaxWatched {
		return nil, fmt.Errorf("%w: webui: %d keys to watch (WithLocks, WithLeaders, WithRates), at most %d", ormlock.ErrInvalidArgument, n, MaxWatched)
	}
	for _, k := range s.rates {
		if err := k.Validate(); err != nil {
			return nil, fmt.Errorf("webui: %w", err)
		}
		if !keys.IsRate(k) {
			return nil, fmt.Errorf("%w: webui: WithRates: %s is not a rate limit (ormlock.Rate)", ormlock.ErrInvalidArgument, k.String())
		}
	}
	for _, k := range append(append([]ormlock.Key{}, s.locks...), s.leaders...) {
		if err := k.Validate(); err != nil {
			return nil, fmt.Errorf("webui: %w", err)
		}
	}
	if s.logger == nil {
		s.logger = slog.Default()
	}
	return s, nil
}

// hostAllowed reports whether the request's Host header names the view.
func (s *settings) hostAllowed(hostport string) bool {
	hostport = strings.ToLower(hostport)
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	switch host {
	case "localhost", "127.0.0.1", "::1":
		return true
	}
	for _, a := range s.hosts {
		if a == hostport || strings.TrimSuffix(strings.TrimPrefix(a, "["), "]") == host {
			return true
		}
	}
	return false
}
