package ormlock

import (
	"database/sql"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"
)

// Defaults of the shared options.
const (
	// DefaultKeepalive is the Session keepalive interval.
	DefaultKeepalive = 2 * time.Second
	// DefaultLedgerTable is the RunOnce ledger table name.
	DefaultLedgerTable = "ormlock_runs"
)

// Config holds the settings shared by every verb. Adapters build it with
// [NewConfig]; users set it through [Option] values, either per call or as the
// defaults of the GORM plugin (per-call options apply on top).
type Config struct {
	// Namespace prefixes name keys; see [WithNamespace].
	Namespace string
	// Wait is how long to wait for a held lock; 0 means try once.
	Wait time.Duration
	// Keepalive is the Session keepalive interval.
	Keepalive time.Duration
	// Observer receives lock events; nil means none.
	Observer Observer
	// LedgerTable is the RunOnce ledger table.
	LedgerTable string
	// Owner identifies this instance in the ledger and in diagnostics.
	Owner string
	// TxOptions are the options of the transaction the verb opens.
	TxOptions *sql.TxOptions
	// Claim selects RunOnce's claim mode.
	Claim bool
	// Fencing issues a fencing token per acquisition; see [WithFencing].
	Fencing bool

	err error
}

// Option sets one setting of a [Config].
type Option func(*Config)

// NewConfig returns the defaults with opts applied in order.
func NewConfig(opts ...Option) Config {
	c := Config{Keepalive: DefaultKeepalive, LedgerTable: DefaultLedgerTable}
	return c.With(opts...)
}

// With returns a copy of c with opts applied in order.
func (c Config) With(opts ...Option) Config {
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}

// Err returns the first error an option reported (an invalid namespace, a
// negative duration, a bad table name), wrapping [ErrInvalidArgument] or
// [ErrInvalidKey].
func (c Config) Err() error { return c.err }

func (c *Config) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// WithNamespace sets a namespace for name keys: on PostgreSQL the key becomes
// keyhash.Int64NS(ns, name), on MySQL/MariaDB the lock name "ns:name". It is
// also part of a RunOnce run's identity in the ledger. The default is no
// namespace. ID and Pair keys ignore it on PostgreSQL. A namespace is valid
// UTF-8 without NUL bytes or ':', at most [MaxNamespaceLen] bytes, and does
// not end with a space (MySQL's ledger would not tell it apart).
//
// What a namespace does: it keeps cooperating code from clashing by accident,
// e.g. two services on one MySQL server (whose named locks are server-wide,
// across schemas) that both name a job "nightly-cleanup". What it does not
// do: isolate code that does not cooperate. Any database user can take any
// advisory or named lock, including another namespace's: by computing its key
// (keyhash is public; an ID key ignores the namespace on PostgreSQL), by
// naming "ns:name" without a namespace on MySQL, or with raw SQL; and
// [HolderInfo] shows who holds it. Mutually distrustful tenants need
// separate databases on PostgreSQL (advisory keys are per database) and
// separate servers on MySQL/MariaDB. See docs/PROTOCOL.md and the Security
// section of docs/RELIABILITY.md.
func WithNamespace(ns string) Option {
	return func(c *Config) {
		if err := ValidateName("namespace", ns); err != nil {
			c.fail(err)
			return
		}
		if strings.HasSuffix(ns, " ") {
			c.fail(fmt.Errorf("%w: namespace %q ends with a space, which MySQL/MariaDB ignore when comparing the ledger's namespaces", ErrInvalidKey, ns))
			return
		}
		if strings.ContainsRune(ns, ':') {
			c.fail(fmt.Errorf("%w: namespace %q contains ':', which separates namespace and name in MySQL lock names", ErrInvalidKey, ns))
			return
		}
		c.Namespace = ns
	}
}

// WithWait makes the verb wait up to d for a held lock instead of trying once.
// On PostgreSQL the wait is a server-side lock_timeout (SET LOCAL), on MySQL
// the GET_LOCK timeout; a context deadline that comes sooner shortens it. The
// default is 0: try once and return [ErrNotAcquired] at once when the lock is
// held.
func WithWait(d time.Duration) Option {
	return func(c *Config) {
		if d < 0 {
			c.fail(fmt.Errorf("%w: WithWait: negative duration %v", ErrInvalidArgument, d))
			return
		}
		c.Wait = d
	}
}

// WithKeepalive sets how often a Session checks its lock connection; loss is
// reported within two intervals. The default is [DefaultKeepalive] (2s).
func WithKeepalive(d time.Duration) Option {
	return func(c *Config) {
		if d <= 0 {
			c.fail(fmt.Errorf("%w: WithKeepalive: duration must be positive, got %v", ErrInvalidArgument, d))
			return
		}
		c.Keepalive = d
	}
}

// WithObserver sets the observer that receives lock events. The default is
// none, which costs nothing on the lock path.
func WithObserver(o Observer) Option { return func(c *Config) { c.Observer = o } }

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// ValidIdentifier reports an error wrapping [ErrInvalidArgument] unless s is
// a plain SQL identifier: a letter or underscore, then letters, digits or
// underscores, at most 63 bytes.
func ValidIdentifier(what, s string) error {
	if !identRE.MatchString(s) {
		return fmt.Errorf("%w: %s %q is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*, at most 63 bytes)", ErrInvalidArgument, what, s)
	}
	return nil
}

// WithLedgerTable sets the RunOnce ledger table name. It must be a plain
// identifier. The default is [DefaultLedgerTable] ("ormlock_runs").
func WithLedgerTable(name string) Option {
	return func(c *Config) {
		if err := ValidIdentifier("WithLedgerTable: table name", name); err != nil {
			c.fail(err)
			return
		}
		c.LedgerTable = name
	}
}

// MaxOwnerLen is the longest owner id [WithOwner] accepts, in characters
// (the ledger's owner column).
const MaxOwnerLen = 255

// WithOwner sets the instance id written to the ledger's owner column: valid
// UTF-8 without NUL bytes, at most [MaxOwnerLen] characters. The default (or
// WithOwner("")) is "hostname/pid".
func WithOwner(id string) Option {
	return func(c *Config) {
		switch {
		case !utf8.ValidString(id) || strings.ContainsRune(id, 0):
			c.fail(fmt.Errorf("%w: WithOwner: owner %q is not valid UTF-8 without NUL bytes", ErrInvalidArgument, id))
		case utf8.RuneCountInString(id) > MaxOwnerLen:
			c.fail(fmt.Errorf("%w: WithOwner: owner is %d characters long, the ledger keeps at most %d", ErrInvalidArgument, utf8.RuneCountInString(id), MaxOwnerLen))
		default:
			c.Owner = id
		}
	}
}

// WithTxOptions sets the options (isolation level, read-only) of the
// transaction the verb opens. The default is the driver's default (nil).
func WithTxOptions(o *sql.TxOptions) Option { return func(c *Config) { c.TxOptions = o } }

// WithClaim selects RunOnce's claim mode for long or non-transactional jobs:
// a "running" ledger row is committed first, fn runs outside the ledger's
// transaction, and the row is then marked "done" or "failed". The default is
// off: the ledger row and fn's work commit together.
func WithClaim() Option { return func(c *Config) { c.Claim = true } }
