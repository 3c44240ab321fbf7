package ormlock

import (
	"database/sql"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/keys"
)

// Option sets one setting of the verbs: pass options per call, or as the
// defaults of the GORM plugin ([gormlock.New]) or the ent wrapper
// (entlock.Wrap), under which per-call options apply. An invalid option makes
// the verb return an error wrapping [ErrInvalidArgument] or [ErrInvalidKey]
// without taking a lock.
type Option = config.Option

// WithNamespace sets a namespace for name keys: on PostgreSQL the key becomes
// keyhash.Int64NS(ns, name), on MySQL/MariaDB the lock name "ns:name"; ID and
// Pair keys ignore it on PostgreSQL. It is part of a RunOnce run's identity:
// Runs reads and Prune deletes only the rows of its namespace. The default is
// no namespace. A namespace is valid UTF-8 without NUL bytes, ':' or a
// trailing space, at most 128 bytes (it must fit the RunOnce ledger's
// namespace column); any other (docs/PROTOCOL.md, Keys on each server) is an
// error wrapping [ErrInvalidKey]. A namespace keeps cooperating code apart;
// it is no security boundary. See docs/PROTOCOL.md (What a namespace does,
// and what it does not).
func WithNamespace(ns string) Option {
	return func(c *config.Config) {
		if err := keys.ValidateName("namespace", ns); err != nil {
			c.Fail(err)
			return
		}
		if strings.HasSuffix(ns, " ") {
			c.Fail(fmt.Errorf("%w: namespace %q ends with a space, which MySQL/MariaDB ignore when comparing the ledger's namespaces", ErrInvalidKey, ns))
			return
		}
		if strings.ContainsRune(ns, ':') {
			c.Fail(fmt.Errorf("%w: namespace %q contains ':', which separates namespace and name in MySQL lock names", ErrInvalidKey, ns))
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
	return func(c *config.Config) {
		if d < 0 {
			c.Fail(fmt.Errorf("%w: WithWait: negative duration %v", ErrInvalidArgument, d))
			return
		}
		c.Wait = d
	}
}

// WithKeepalive sets how often a Session or Lead checks its lock
// connection; loss is reported within two intervals, a server that stopped
// answering as docs/PROTOCOL.md (Deadlines) says. The default is 2s; the
// floor is 10ms: a shorter d (zero and negative included) is an error
// wrapping [ErrInvalidArgument].
func WithKeepalive(d time.Duration) Option {
	return func(c *config.Config) {
		if d < config.MinKeepalive {
			c.Fail(fmt.Errorf("%w: WithKeepalive: interval %v is below the floor of %v", ErrInvalidArgument, d, config.MinKeepalive))
			return
		}
		c.Keepalive = d
	}
}

// WithObserver sets the observer that receives lock events. The default is
// none, which costs nothing on the lock path.
func WithObserver(o Observer) Option {
	return func(c *config.Config) {
		c.Observer = o
	}
}

// WithHook sets the [Hook] told of each lock use's start and end, under
// whose context the use runs. The default is none. See [Hook] for how it
// composes with [WithObserver].
func WithHook(h Hook) Option {
	return func(c *config.Config) {
		c.Hook = h
	}
}

// WithLedgerTable sets the RunOnce ledger table name. It must be a plain
// identifier. The default is "ormlock_runs".
func WithLedgerTable(name string) Option {
	return func(c *config.Config) {
		if err := config.ValidIdentifier("WithLedgerTable: table name", name); err != nil {
			c.Fail(err)
			return
		}
		c.LedgerTable = name
	}
}

// WithRateTable sets the token table of rate limits ([Rate]), which
// Migrate creates. It must be a plain identifier. The default is
// "ormlock_rate_tokens".
func WithRateTable(name string) Option {
	return func(c *config.Config) {
		if err := config.ValidIdentifier("WithRateTable: table name", name); err != nil {
			c.Fail(err)
			return
		}
		c.RateTable = name
	}
}

// WithOwner sets the instance id written to the ledger's owner column: valid
// UTF-8 without NUL bytes, at most 255 characters. The default (or
// WithOwner("")) is "hostname/pid".
func WithOwner(id string) Option {
	return func(c *config.Config) {
		switch {
		case !utf8.ValidString(id) || strings.ContainsRune(id, 0):
			c.Fail(fmt.Errorf("%w: WithOwner: owner %q is not valid UTF-8 without NUL bytes", ErrInvalidArgument, id))
		case utf8.RuneCountInString(id) > config.MaxOwnerLen:
			c.Fail(fmt.Errorf("%w: WithOwner: owner is %d characters long, the ledger keeps at most %d", ErrInvalidArgument, utf8.RuneCountInString(id), config.MaxOwnerLen))
		default:
			c.Owner = id
		}
	}
}

// WithTxOptions sets the options (isolation level, read-only) of the
// transaction the verb opens. The default is the driver's default (nil).
func WithTxOptions(o *sql.TxOptions) Option { return func(c *config.Config) { c.TxOptions = o } }

// WithClaim selects RunOnce's claim mode for long or non-transactional jobs:
// a "running" ledger row is committed first, fn runs outside the ledger's
// transaction, and the row is then marked "done" or "failed". The default is
// off: the ledger row and fn's work commit together.
func WithClaim() Option { return func(c *config.Config) { c.Claim = true } }

// WithoutCampaign makes Lead a follower: it never campaigns and never
// calls fn, and returns the context's cause when db's context ends. Run a
// replica that must never lead (a host being drained, a read-only region)
// with it, and read who leads with Holder. Any verb but Lead refuses it
// with an error wrapping [ErrInvalidArgument]. See docs/OPERATIONS.md.
func WithoutCampaign() Option { return func(c *config.Config) { c.NoCampaign = true } }

// WithSharedLockConns makes a Session or Lead hold its lock on one of at
// most n lock connections that the Sessions and Leads of this process
// asking for it share per pool, instead of a connection of its own: 1,000
// held locks cost n server connections. Each still releases only its own
// key and learns of a killed connection within two of its own keepalive
// intervals (every Session on a connection that dies is cancelled with
// [ErrLockLost]); a wait for a held key is a try-lock repeated with a
// backoff capped at the keepalive, which is not queued on the server: it
// starves against waiters of the same key on dedicated connections, so
// give every waiter of a contended key the same kind of connection.
// It needs session-level locks: direct PostgreSQL (with the pgx driver,
// which tells a pooler apart) or MySQL/MariaDB; behind a transaction-mode
// pooler such as PgBouncer the verb returns [ErrUnsupportedDialect] before
// anything is taken. Transaction and RunOnce ignore it. The default is 0:
// a lock connection per Session; passing 0 asks for that default (it undoes
// a plugin's or wrapper's WithSharedLockConns for one call), and a negative
// n is [ErrInvalidArgument]. See docs/PROTOCOL.md (Shared lock
// connections).
func WithSharedLockConns(n int) Option {
	return func(c *config.Config) {
		if n < 0 {
			c.Fail(fmt.Errorf("%w: WithSharedLockConns: n must be 0 (a lock connection per Session) or more, got %d", ErrInvalidArgument, n))
			return
		}
		c.SharedConns = n
	}
}

// WithLease takes the lock as a lease: a row of the lease table (see
// [WithLeaseTable]) that the call inserts, or takes over once it expired by
// the database server's clock, in a statement committed on its own, and
// that it renews every ttl/3 (with jitter) while fn runs. A lease pins no
// connection between its statements, so it works behind a transaction
// pooler (PgBouncer in transaction mode) and on servers whose advisory or
// named locks exclude nobody (a Galera cluster). Its fencing token
// ([FencingToken]) is the lease's epoch, which grows with every
// acquisition of the key and never goes back. A holder that cannot renew
// in time, or finds its lease taken over, sees fn's context cancelled with
// cause [ErrLockLost] before the server could grant the key to anyone else;
// a Transaction's COMMIT goes only with a check of the lease in fn's
// transaction, so a holder paused past its lease cannot commit after a
// takeover. A lease and an advisory or named lock of the same key are
// different locks: they do not exclude each other. The table is created by
// every adapter's Migrate ([MigrateSQL] prints its DDL).
//
// ttl 0 means the default, 30s; a ttl under 1s or over 24h is an error
// wrapping [ErrInvalidArgument], which the verb returns without taking a
// lock. The default is no lease (the server's own locks). See
// docs/PROTOCOL.md (Leases).
func WithLease(ttl time.Duration) Option {
	return func(c *config.Config) {
		if ttl == 0 {
			ttl = config.DefaultLeaseTTL
		}
		if ttl < config.MinLeaseTTL || ttl > config.MaxLeaseTTL {
			c.Fail(fmt.Errorf("%w: WithLease: ttl %v is outside %v..%v (0 means the default, %v)", ErrInvalidArgument, ttl, config.MinLeaseTTL, config.MaxLeaseTTL, config.DefaultLeaseTTL))
			return
		}
		c.Lease = ttl
	}
}

// WithLeaseTable sets the lease table's name ([WithLease]). It must be a
// plain identifier. The default is "ormlock_leases".
func WithLeaseTable(name string) Option {
	return func(c *config.Config) {
		if err := config.ValidIdentifier("WithLeaseTable: table name", name); err != nil {
			c.Fail(err)
			return
		}
		c.LeaseTable = name
	}
}
