package ormlock

import "github.com/ormlock/ormlock/internal/config"

// EventKind says what happened to a lock. Its String method returns the
// event's snake_case name, e.g. "not_acquired". It is defined once, in
// internal/config, and named here.
type EventKind = config.EventKind

// The events an [Observer] receives.
const (
	// EventAttempt: an acquisition is about to be tried.
	EventAttempt = config.EventAttempt
	// EventAcquired: the lock was taken; Event.Wait is the time it took.
	EventAcquired = config.EventAcquired
	// EventNotAcquired: another holder has the lock (or the wait ran out).
	EventNotAcquired = config.EventNotAcquired
	// EventReleased: the lock was released; Event.Held is the hold time.
	EventReleased = config.EventReleased
	// EventReleaseFailed: the release failed or reported the lock not held;
	// the connection was destroyed so the server frees the lock.
	EventReleaseFailed = config.EventReleaseFailed
	// EventLockLost: a Session's lock connection failed while fn ran.
	EventLockLost = config.EventLockLost
	// EventAlreadyDone: RunOnce found the slot already done (or skipped),
	// or, with Err wrapping [ErrPaused], its job paused: fn was not called.
	EventAlreadyDone = config.EventAlreadyDone
	// EventSemaphoreMismatch: a Semaphore(k, n) acquisition saw slot n+1
	// of k held, so another caller uses k with a larger n and up to that
	// many hold k at once, not n (docs/PROTOCOL.md, Semaphore: at most n
	// holders). Err says which slot. It comes before the acquisition's
	// acquired or not_acquired, and changes nothing else.
	EventSemaphoreMismatch = config.EventSemaphoreMismatch
)

// Event describes one thing that happened to a lock. It is defined once,
// in internal/config, and named here; its fields:
//
//	type Event struct {
//		Kind EventKind
//		// Verb is "Transaction", "Session", "RunOnce" or "Lead" (whose
//		// acquired is elected and lock_lost deposed), or "Lock" (sqllock's and
//		// pgxlock's, in the caller's transaction: its lock ends with that
//		// transaction, after Lock returned, so no released event follows, and
//		// a Hook's End comes with EventAcquired).
//		Verb string
//		// Dialect is "postgres" or "mysql".
//		Dialect string
//		// Key is the lock's key and Namespace its namespace. A RunOnce key has
//		// the slot in it (see RunKey), so there is one per run.
//		Key       Key
//		Namespace string
//		// Job is the RunOnce job name ("" for the other verbs): a label with a
//		// value per job, not per run.
//		Job string
//		// Wait is how long acquisition took (EventAcquired, EventNotAcquired).
//		Wait time.Duration
//		// Held is how long the lock was held (EventReleased, EventReleaseFailed,
//		// EventLockLost).
//		Held time.Duration
//		// Err is the error behind EventReleaseFailed and EventLockLost, and
//		// what EventSemaphoreMismatch saw.
//		Err error
//
//		// ID names the acquisition: one value per lock use (a verb call; a
//		// RunScheduled run; a whole Lead, over all its terms), the same on
//		// all its events and its hook's Start and End, unique in the process.
//		ID uint64
//		// Server is what the server said it is at the server check, as
//		// OpenTelemetry's db.system.name: "postgresql", "mysql", "mariadb"
//		// (also "cockroachdb", "yugabytedb", "tidb"); "" when no check was
//		// made (a refused call). It costs no round trip: the check's own
//		// query names the server.
//		Server string
//		// Slot is the run's slot (RunOnce, RunScheduled); zero for the other
//		// verbs. Per run: never a metric label.
//		Slot time.Time
//		// Token is the fencing token of the acquisition once issued
//		// (WithFencing): Transaction and RunOnce issue it with the lock, so
//		// EventAcquired carries it; a Session or Lead term just after it, so
//		// its release (or loss) and the hook's End do. 0 without one.
//		Token int64
//		// Try is true when the acquisition tries once, false when it waits
//		// (WithWait).
//		Try bool
//		// Term is Lead's term: 1 for the first campaign attempt, counting up
//		// (a new election after a deposition is a new term); the hook's End
//		// of a Lead carries its last. 0 for the other verbs.
//		Term int64
//
//		// Mechanism is the kind of lock taken: "advisory" (PostgreSQL),
//		// "named" (MySQL/MariaDB GET_LOCK) or "lease" (WithLease), as
//		// HolderInfo.Mechanism names it. Under a lease, Token is the
//		// lease's epoch (whether or not WithFencing was given).
//		Mechanism string
//		// LeaseTTL is the lease's TTL under WithLease (its default when
//		// given 0), 0 otherwise: with the acquisition's time, when the lease
//		// would expire unless renewed.
//		LeaseTTL time.Duration
//	}
type Event = config.Event

// Observer receives lock events. Observe is called synchronously on the
// locking goroutine (or the keepalive goroutine for EventLockLost) and must
// not block. When no observer is set, no event is built at all.
//
// An observer cannot cost a lock, a connection or the process: a panic in
// Observe is recovered, the verb goes on (and releases) as if Observe had
// returned, and the first panic of each verb call is logged once, at
// slog.LevelError on slog.Default(), with the event kind, verb, key, panic
// value and stack. The observer still receives the call's later events.
// Observe must not call runtime.Goexit (testing's t.FailNow does), which
// cannot be recovered.
//
// It is defined once, in internal/config, and named here:
//
//	type Observer interface {
//		Observe(ctx context.Context, e Event)
//	}
type Observer = config.Observer

// Hook is told when a verb's use of a lock starts and ends, and carries a
// context of its own through it: what a tracer needs (a span per verb call,
// parent of fn's work), which an [Observer], told of each event on the
// locking goroutine, cannot do.
//
// Start is called as Transaction, Session, Lead or RunOnce (RunScheduled:
// per run) starts its attempt, once its arguments and the server were
// checked, with an [EventAttempt] event; the verb then runs under the
// context Start returns: the lock's statements, and fn, whose context
// derives from it (GORM: tx.Statement.Context; ent's fn gets no context,
// so there only the lock's statements do). End is called once, as the verb
// returns, with that context and the use's last event: EventReleased (Held
// set), EventNotAcquired (Wait set), EventReleaseFailed or EventLockLost,
// whose Err is the error the verb returns (nil when it succeeded,
// ErrAlreadyDone for a RunOnce slot already done). It is called on every
// path out of the verb: when fn panics or calls runtime.Goexit, End comes
// once the transaction was rolled back and the lock released, before the
// panic goes on to the caller (unchanged) or the goroutine ends, and its
// Err is a [*PanicError]. A Lead is one use, over all its terms. A call
// refused before its attempt (an invalid argument, a refused server, an
// ended context) calls neither.
//
// A hook composes with an observer: both receive the events, each set by
// its own option, and a per-call option replaces the default of its own
// kind only (WithHook the plugin's or wrapper's hook, WithObserver its
// observer). A panic in Start or End is contained as an observer's is
// (Start's: the verb runs under ctx). The default is no hook, which costs
// nothing.
//
// A hook may also implement [EventHook] (each event of the use, between
// Start and End) and [KeepaliveHook] (the context of a Session's
// keepalive statements). The Event's ID is the same on Start, End and
// every event of the use. otelormlock is such a hook.
//
// It is defined once, in internal/config, and named here:
//
//	type Hook interface {
//		Start(ctx context.Context, e Event) context.Context
//		End(ctx context.Context, e Event)
//	}
type Hook = config.Hook

// KeepaliveHook is a [Hook] that supplies the context of the keepalive
// statements of a Session or a Lead term (the pings that check, every
// [WithKeepalive] interval, that the lock connection still holds the
// lock). Those run for as long as fn does, and a tracer does not want them
// under the caller's trace: KeepaliveContext gets the context Start
// returned, without its cancellation, and returns the one the pings run
// on, which should keep ctx's values but not the hook's span (otelormlock
// returns ctx with no span in it). Its cancellation is ignored: the pings
// stop with fn. A panic in KeepaliveContext is contained as Start's.
//
// A hook that does not implement it, and no hook, leave the keepalive on
// the verb's context without its cancellation (context.WithoutCancel): its
// values, whatever they are, and no deadline. Shared lock connections
// ([WithSharedLockConns]) serve many callers and check on a context of
// their own (context.Background()).
//
// It is defined once, in internal/config, and named here:
//
//	type KeepaliveHook interface {
//		Hook
//		KeepaliveContext(ctx context.Context) context.Context
//	}
type KeepaliveHook = config.KeepaliveHook

// EventHook is a [Hook] that is also told of each event of a use
// between its Start and End: the acquisition (EventAcquired, with Wait
// and, under WithFencing, Token), a refusal, the release, a loss; a Lead's
// terms each have theirs (Term set: EventAcquired is an election,
// EventLockLost a deposition). Event gets the context of the use (Start's,
// or one derived from it) and is called on the locking goroutine, or on
// the keepalive's for EventLockLost; it must not block. A meter keeps its
// gauges with it (the locks held, the callers waiting). A panic in Event
// is contained as an observer's is. The EventAttempt that Start gets is
// not repeated.
//
// Term is called as a Lead term's fn is about to run, once the term was
// elected, with fn's context and the term's EventAcquired (Term, and
// Token under WithFencing, set); fn runs under the context it returns (a
// tracer's span per term, parent of fn's work), or under ctx when it
// returns nil or panics (contained as Event's panic). A hook with nothing
// to add returns ctx.
//
// It is defined once, in internal/config, and named here:
//
//	type EventHook interface {
//		Hook
//		Event(ctx context.Context, e Event)
//		Term(ctx context.Context, e Event) context.Context
//	}
type EventHook = config.EventHook

// ObserverFunc adapts a function to [Observer]: its Observe method calls
// f(ctx, e). It is defined once, in internal/config, and named here:
//
//	type ObserverFunc func(ctx context.Context, e Event)
type ObserverFunc = config.ObserverFunc
