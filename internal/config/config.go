// Package config is the settings every verb shares, built from the
// ormlock.Option values a caller passes (ormlock.Option is an alias of
// [Option]). The options themselves, with their documented defaults, are in
// package ormlock; this package holds only what the adapters, the lock
// protocol and the ledger read.
package config

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/ormlock/ormlock/internal/errs"
)

// Defaults of the shared options (documented on the options).
const (
	// DefaultResignCooldown is ormlock.DefaultResignCooldown: how long a
	// leader asked to resign stays out of the election when the action
	// names no cooldown.
	DefaultResignCooldown = 30 * time.Second
	// DefaultKeepalive is the Session keepalive interval.
	DefaultKeepalive = 2 * time.Second
	// MinKeepalive is the shortest keepalive interval accepted: a check
	// is a round trip, so a shorter one would only keep the lock
	// connection busy (and time out on a busy server).
	MinKeepalive = 10 * time.Millisecond
	// DefaultLedgerTable is the RunOnce ledger table name.
	DefaultLedgerTable = "ormlock_runs"
	// DefaultLeaseTable is the lease table name (ormlock.WithLeaseTable).
	DefaultLeaseTable = "ormlock_leases"
	// DefaultLeaseTTL is a lease's time to live when ormlock.WithLease is
	// given 0.
	DefaultLeaseTTL = 30 * time.Second
	// MinLeaseTTL and MaxLeaseTTL bound ormlock.WithLease's ttl.
	MinLeaseTTL = time.Second
	MaxLeaseTTL = 24 * time.Hour
	// DefaultRateTable is the rate limits' token table (ormlock.Rate).
	DefaultRateTable = "ormlock_rate_tokens"
)

// MaxOwnerLen is the longest owner id ormlock.WithOwner accepts, in
// characters (the ledger's owner column).
const MaxOwnerLen = 255

// Config holds the settings shared by every verb. Adapters build it with
// [New]; users set it through ormlock.Option values, either per call or as
// the defaults of the GORM plugin or ent wrapper (per-call options apply on
// top).
type Config struct {
	// Namespace prefixes name keys; see ormlock.WithNamespace.
	Namespace string
	// Wait is how long to wait for a held lock; 0 means try once.
	Wait time.Duration
	// Keepalive is the Session keepalive interval.
	Keepalive time.Duration
	// Observer receives lock events (ormlock.WithObserver), or nil for
	// none.
	Observer Observer
	// Hook is told of the start and the end of each lock use
	// (ormlock.WithHook), or nil for none.
	Hook Hook
	// LedgerTable is the RunOnce ledger table.
	LedgerTable string
	// RateTable is the rate limits' token table (ormlock.WithRateTable).
	RateTable string
	// Owner identifies this instance in the ledger and in diagnostics.
	Owner string
	// OwnerRow makes a Session on MySQL/MariaDB write the owner row that
	// a Lead writes (internal/lockproto/owner.go) once it holds its lock:
	// set by ormlock run --owner, never by a library option.
	OwnerRow bool
	// TxOptions are the options of the transaction the verb opens.
	TxOptions *sql.TxOptions
	// Claim selects RunOnce's claim mode.
	Claim bool
	// NoCampaign makes Lead follow without campaigning
	// (ormlock.WithoutCampaign).
	NoCampaign bool
	// FirstTry, when set, makes Lead's first campaign attempt try once,
	// and is closed when that attempt has ended unelected, or when the term
	// it won ends (schedhook.FirstTry).
	FirstTry chan struct{}
	// Fencing issues a fencing token per acquisition (ormlock.WithFencing).
	Fencing bool
	// CatchUpWindow and CatchUpPolicy: RunScheduled's catch-up of missed
	// slots (ormlock.WithCatchUp); a zero window means none.
	CatchUpWindow time.Duration
	CatchUpPolicy CatchUpPolicy
	// SharedConns is the most lock connections the Sessions and Leads that
	// ask for it share per pool (ormlock.WithSharedLockConns); 0: a
	// connection of its own per Session.
	SharedConns int
	// Now, when set, is the time RunScheduled takes as the current one
	// (schedhook.Now); the zero time means time.Now().
	Now time.Time
	// clock, when set, is the caller's clock that RunScheduled's catch-up
	// compares with the database server's (schedhook.Clock, SetClock); nil
	// means time.Now. A pointer, so that a Config stays comparable.
	clock *func() time.Time
	// Firing is how RunScheduled answers a scheduler's firing
	// (schedhook.Firing): as configured, or with one run.
	Firing Firing
	// OneRun makes RunScheduled call fn at most once (schedhook.OneRun):
	// a pending rerun runs only in place of a slot of the call's own that
	// it did not run (taken, done, paused), never after one it ran.
	OneRun bool
	// Lease, when positive, takes the lock as a lease of this time to
	// live (ormlock.WithLease): a row of LeaseTable, not a server lock.
	Lease time.Duration
	// LeaseTable is the lease table (ormlock.WithLeaseTable).
	LeaseTable string
	// ClaimNoTx, with Claim, hands fn no transaction of its own
	// (schedhook.ClaimNoTx): sqllock's and pgxlock's fn get a nil tx.
	ClaimNoTx bool

	err error
}

// Option sets one setting of a [Config] (ormlock.Option).
type Option func(*Config)

// New returns the defaults with opts applied in order.
func New(opts ...Option) Config {
	c := Config{Keepalive: DefaultKeepalive, LedgerTable: DefaultLedgerTable, LeaseTable: DefaultLeaseTable, RateTable: DefaultRateTable}
	return c.With(opts...)
}

// With returns a copy of c with opts applied in order.
func (c Config) With(opts ...Option) Config {
	if len(opts) == 0 {
		return c // no option: c need not move to the heap (see with)
	}
	return c.with(opts)
}

// with applies opts to c, which escapes: an option is a function taking
// &c.
func (c Config) with(opts []Option) Config {
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}

// Err returns the first error an option reported (an invalid namespace, a
// negative duration, a bad table name), wrapping ormlock.ErrInvalidArgument
// or ormlock.ErrInvalidKey.
func (c Config) Err() error { return c.err }

// Fail records err as the option error unless one is recorded already.
func (c *Config) Fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// ValidIdentifier reports an error wrapping ormlock.ErrInvalidArgument unless s is a plain
// SQL identifier: a letter or underscore, then letters, digits or
// underscores, at most 63 bytes. what names the value in the error.
func ValidIdentifier(what, s string) error {
	if !identRE.MatchString(s) {
		return fmt.Errorf("%w: %s %q is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*, at most 63 bytes)", errs.ErrInvalidArgument, what, s)
	}
	return nil
}

// LeaseTableName is c.LeaseTable, or DefaultLeaseTable when it is unset
// (a Config not made by New).
func (c Config) LeaseTableName() string {
	if c.LeaseTable == "" {
		return DefaultLeaseTable
	}
	return c.LeaseTable
}

// Firing says how RunScheduled answers one firing of a scheduler.
type Firing uint8

const (
	// FiringAsConfigured runs the catch-up that WithCatchUp asks for, then
	// the current slot.
	FiringAsConfigured Firing = iota
	// FiringFirst answers a job's first firing with one run: the current
	// slot if it has not run, else the newest missed one.
	FiringFirst
	// FiringLater answers a later firing with the current slot only.
	FiringLater
)

// SetClock sets the clock of [Config.ClockFunc]; nil keeps time.Now.
func (c *Config) SetClock(clock func() time.Time) {
	c.clock = nil
	if clock != nil {
		c.clock = &clock
	}
}

// ClockFunc returns the clock SetClock set, or time.Now when none is set.
func (c Config) ClockFunc() func() time.Time {
	if c.clock != nil {
		return *c.clock
	}
	return time.Now
}

// NowTime returns the time RunScheduled takes as now: c.Now, else a
// reading of c's clock.
func (c Config) NowTime() time.Time {
	if c.Now.IsZero() {
		return c.ClockFunc()()
	}
	return c.Now
}

// CatchUpPolicy is ormlock.CatchUpPolicy: which missed slots RunScheduled
// runs.
type CatchUpPolicy int

// The catch-up policies (ormlock.CatchUpLatest, ormlock.CatchUpAll).
const (
	CatchUpLatest CatchUpPolicy = iota + 1
	CatchUpAll
)

// String returns "latest" or "all".
func (p CatchUpPolicy) String() string {
	switch p {
	case CatchUpLatest:
		return "latest"
	case CatchUpAll:
		return "all"
	}
	return "CatchUpPolicy(" + strconv.Itoa(int(p)) + ")"
}

type lockKey struct{}

// WithLock returns ctx carrying l, the lock fn runs under. Only the lock
// protocol sets it.
func WithLock(ctx context.Context, l Lock) context.Context {
	return context.WithValue(ctx, lockKey{}, l)
}

// LockOf returns the lock ctx carries (the innermost verb's), or nil.
func LockOf(ctx context.Context) Lock {
	if ctx == nil {
		return nil
	}
	l, _ := ctx.Value(lockKey{}).(Lock)
	return l
}
