// Package ormlock holds the shared vocabulary of ormlock: keys, options,
// events and errors. The verbs live in four adapters, one per data layer:
// gormlock for GORM, entlock for ent, sqllock for a plain *sql.DB
// (database/sql, sqlc, sqlx, bun) and pgxlock for pgx's *pgxpool.Pool. They
// take the same locks, keys, ledger and fencing tokens, so a key excludes
// across all of them.
//
// ormlock takes distributed locks on the database a service already runs:
// PostgreSQL advisory locks and MySQL/MariaDB named locks (GET_LOCK), inside
// the ORM's (or the driver's) own transaction. Three replicas of a service that run the same
// midnight job can make exactly one of them do the work:
//
//	err := gormlock.Transaction(db, "daily-settlement", func(tx *gorm.DB) error {
//		return settle(tx)
//	})
//	if errors.Is(err, ormlock.ErrNotAcquired) {
//		return nil // another replica is doing it
//	}
//
// # The verbs
//
// Every adapter has the same verbs: Transaction runs fn in one transaction
// while the lock is held; Session holds the lock on a dedicated connection
// while a long fn uses the pool; Lead elects one leader per key among the
// replicas that call it and runs fn on the leader, with a ctx that ends
// when leadership is lost (then, once fn has returned, it campaigns
// again); RunOnce runs a job at most once
// per (job, slot), with its ledger (Migrate, Runs, Prune, RunScheduled);
// Holder says who holds a lock. What each does on each server:
// docs/PROTOCOL.md (The verbs on each server; Lead).
//
// # Contracts of the verbs
//
// Every adapter has the same verbs, with the same contracts, stated here
// once; an adapter's doc says only what differs (its handle, what fn gets,
// where the context comes from). One body implements them for all four
// (internal/verbs), so they check, order and wrap errors alike.
//
//   - Transaction(handle, key, fn, opts...) runs fn in one transaction of
//     the handle's database while key's lock is held, commits when fn
//     returns nil and rolls back otherwise (a panic included, re-raised),
//     and returns fn's error unchanged (a failed rollback after it is
//     added). It tries once: [ErrNotAcquired] when another holder has the
//     lock, fn not called; [WithWait] waits. fn's context carries the
//     fencing token ([FencingToken], with [WithFencing]).
//   - Session(handle, key, fn, opts...) holds the lock on a connection of
//     its own while fn runs through the normal pool, outside one long
//     transaction; a keepalive ([WithKeepalive]) cancels fn's context with
//     cause [ErrLockLost] when the lock is lost, and the error then wraps
//     it. [WithSharedLockConns] shares a few lock connections among many
//     Sessions.
//   - Lead(handle, key, fn, opts...) campaigns for the lock and runs fn
//     while this caller leads (fn's context cancelled with cause
//     ErrLockLost when leadership is lost, then a new campaign); it returns
//     fn's own error when fn returns by itself (nil: resigned), or the
//     context's cause. Each term gets a greater fencing token.
//   - RunOnce(handle, job, slot, fn, opts...) runs fn at most once per
//     (job, slot) across every instance, recorded in the ledger ([Migrate]
//     creates it): [ErrAlreadyDone] when the slot is done; fn's work and
//     the ledger row commit together, or, with [WithClaim], a claim is
//     committed first and fn runs outside the ledger's transaction. fn
//     reads the slot with [Slot]. RunScheduled(handle, job, schedule, fn,
//     opts...) is RunOnce for the [Schedule]'s slot of now, and with
//     [WithCatchUp] for missed slots first.
//   - Migrate creates or upgrades the ledger and fence tables; Runs reads a
//     job's runs ([Run], stale ones marked); Prune deletes finished and
//     stale runs older than a window;
//     AdvanceFences moves every fencing counter past a promotion's gap;
//     Holder says who holds a lock ([HolderInfo]).
//   - sqllock and pgxlock also have Lock(ctx, tx, key, opts...), which
//     takes the lock in a transaction the caller began (PostgreSQL only),
//     held until that transaction ends: gormlock's Transaction does so
//     when its db is already in a transaction (docs/PROTOCOL.md, Nested
//     calls).
//
// Before anything is sent, a call with several faults returns one error,
// the first in the order docs/PROTOCOL.md (The verbs on each server, Error
// precedence) lists. [WithObserver] and [WithHook] see each lock
// use. The protocol on each server, deadlines, cancellation, isolation
// levels and pool sizing: docs/PROTOCOL.md.
//
// # Keys
//
// Names are hashed to PostgreSQL keys by package keyhash (spec v1, a
// compatibility promise). How each key form maps to each server:
// docs/PROTOCOL.md (Keys on each server).
//
// Three lock shapes are keys too, accepted by Transaction and Session in
// every adapter: [All] (several keys, all or none, in one canonical order
// that never deadlocks), [Shared] (share mode, PostgreSQL) and [Semaphore]
// (at most n holders); Holders lists every holder of any key. What each
// combines with: docs/PROTOCOL.md (Lock shapes).
//
// A rate limit is a key of Transaction too: [Rate] (at most n acquisitions
// per interval across every replica, a token row taken inside fn's
// transaction, given back when it rolls back; holders never wait for one
// another). Each adapter's Usage reads its tokens in use, [RetryAfter] a
// refusal's next due token. docs/PROTOCOL.md (Rate limits).
//
// # Slots
//
// RunOnce records one run per (job, slot). A [Schedule] maps the time a job
// was triggered to its slot: [Cron] for the cron dialects of robfig/cron
// and gocron, with or without seconds (their own parser, firing for
// firing), [Every]
// for a period (aligned to midnight, or anchored to the Unix epoch).
// Instances whose clocks or start times differ by seconds agree on the slot.
// The dialect and the slot rules: docs/SCHEDULES.md.
//
// # Errors
//
// Every outcome has one sentinel ([ErrNotAcquired], [ErrLockLost],
// [ErrCommitUnknown] when a COMMIT got no answer, [ErrAlreadyDone],
// [ErrUnsupportedDialect], [ErrInvalidKey], [ErrInvalidArgument],
// [ErrImplicitCommit] when MySQL/MariaDB committed fn's transaction
// implicitly, and [ErrStaleToken] for fenced writes); compare with
// errors.Is. The callback's own error is returned unchanged (a failed
// rollback after it is added, as ent's WithTx does). Messages
// start with "ormlock: " once, however many layers added their context.
//
// # What is here, and what is not
//
// This package holds the names a user writes, and nothing else: keys
// ([Key], [Name], [ID], [Pair], [KeyType] for the verbs' key parameter, and
// [RunKey], the key of a RunOnce run, for Holder lookups), options as
// opaque values ([Option] and the With functions), the errors, observing
// ([Observer], [ObserverFunc], [Event], [EventKind] and its constants,
// [SlogObserver]), [HolderInfo], the ledger's [Run] (its Status is a plain
// string: "running", "done" or "failed"), the schedules ([Schedule], [Cron],
// [Every], [SlotTolerance]) and fencing ([WithFencing], [FencingToken],
// [CheckFenced]). Limits are not settings, so they are not names here: the
// docs of [Name], [WithNamespace] and the adapters' RunOnce state them, and
// the verbs (and the scheduler module's constructors, at start-up) refuse
// what exceeds them with an error that says so. Defaults are stated in
// their option's doc. What the adapters share to implement the verbs (the
// lock protocol, the settings an Option sets, key derivation, the cron
// parser and slot search, the ledger) lives under internal/ and is not a
// promise; docs/PROTOCOL.md describes its behaviour per dialect.
//
// # Where the types live
//
// Each type is defined once. The documented types that the protocol and
// the ledger build or read ([Key], [Event], [EventKind], [Observer],
// [ObserverFunc], the hooks, [HolderInfo], [Run], [PanicError],
// [CatchUpPolicy], [Option]) are defined under internal/ (internal/keys,
// internal/config, internal/status, internal/errs) and named here by
// alias, so the protocol builds an [Event] once and hands the observer that
// very value, with no copy or wrapper between them; the packages under
// internal/ never import this one, and they return the root's very
// sentinels, which internal/errs defines and this package names. Since go
// doc shows an alias with its own comment only, each alias's comment shows
// its type's fields and methods (TestAliasDocs keeps them complete). An
// API diff (golang.org/x/exp's apidiff) reports a type that moved behind
// an alias, and each signature naming it, as changed: a false report, since
// the type, its fields and methods are what they were and every use
// compiles as before (only reflection and fmt's %T name the package that
// defines it). [Schedule] and [KeyType] are defined here, as no
// internal package needs more than their values. Two rules keep the import
// graph one way, and scripts/import-check (make lint) checks them: no
// package under internal/ that the library links imports the root, and no
// other module (the scheduler, otelormlock, the examples, bench) imports a
// package under internal/ but the test servers (internal/testdb).
// Schedulers get their public hooks from package schedhook.
//
// # Observing locks
//
// An [Observer], set with [WithObserver], receives an [Event] for each step
// of a lock's use: attempt, acquired (with the wait), not_acquired,
// released (with the hold time), release_failed, lock_lost, for RunOnce
// already_done, and semaphore_mismatch when a Semaphore sees another
// caller use its key with a larger n. Nothing is built when no observer is
// set.
// [SlogObserver] writes the events to a log/slog logger (docs/PROTOCOL.md,
// Events and SlogObserver). A [Hook], set with [WithHook], is told when each
// lock use starts and ends and carries a context of its own through it
// (a tracer's span per call, parent of fn's work). [HolderInfo] is the
// answer of the adapters' Holder lookups: who holds a lock right now.
package ormlock
