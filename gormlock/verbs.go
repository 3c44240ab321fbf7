package gormlock

import (
	"context"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/ledger"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/verbs"
)

// Session holds the lock named by key on a dedicated connection for as long
// as fn runs; fn works through the normal pool (db.WithContext(ctx)), not
// inside one long transaction. Acquisition is as in [Transaction]. A
// keepalive ([ormlock.WithKeepalive], default 2s) cancels fn's ctx with
// cause [ormlock.ErrLockLost] when the lock is lost, and Session's error then
// wraps ErrLockLost. Per-dialect mechanism, timeouts and pool sizing: see
// docs/PROTOCOL.md (The verbs on each server, Session).
func Session[K ormlock.KeyType](db *gorm.DB, key K, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
	return verbs.Session(ctxOf(db), binder{db}, pkg, keys.Of[ormlock.Key](key), fn, opts)
}

// Lead campaigns for the lock named by key and runs fn while this caller
// leads: it waits for the lock as a [Session] does (on the server, asking
// again when a wait runs out, retrying after connection errors with a
// bounded backoff), then calls fn with a ctx that is cancelled with cause
// [ormlock.ErrLockLost] when leadership is lost. When fn returns by itself,
// the lock is released and Lead returns fn's error (nil: resigned); after a
// loss, Lead waits for fn to return and campaigns again. Lead returns the
// context's cause when db's context (db.WithContext) ends. With
// [ormlock.WithFencing] every term gets a greater token
// ([ormlock.FencingToken]); [ormlock.WithOwner] names this replica for
// [Holder]. An invalid key or option, an unsupported dialect or a refused
// login is returned at once. A leader asked to step down ([Act] with
// [ormlock.Resign]; each term polls the key's row of the controls table
// through the pool once per keepalive interval, once per renewal interval
// under [ormlock.WithLease]) sees fn's ctx cancelled with a cause wrapping
// [ormlock.ErrLockLost] that says who asked and why; it releases the lock
// once fn returns, stays out of the election for the resign's cooldown,
// then campaigns again. With [ormlock.WithoutCampaign] Lead follows: it
// never campaigns nor calls fn, and returns the context's cause when it
// ends. See docs/PROTOCOL.md (Lead) and docs/OPERATIONS.md (Leaders).
func Lead[K ormlock.KeyType](db *gorm.DB, key K, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
	return verbs.Lead(ctxOf(db), binder{db}, pkg, keys.Of[ormlock.Key](key), fn, opts)
}

// RunScheduled is [RunOnce] for the slot of the current time under
// schedule: RunOnce(db, job, schedule.Slot(time.Now()), fn, opts...). It
// is the form that cannot get the slot wrong: every instance that fires for
// the same scheduled time, a little early or late, passes the same slot,
// which a slot taken from the trigger's own clock would not (see
// [ormlock.Schedule]). With [ormlock.WithCatchUp] it first runs the missed
// slots of the window; fn reads the slot it runs with
// ormlock.Slot(tx.Statement.Context). A nil schedule is an error wrapping
// [ormlock.ErrInvalidArgument]. See docs/SCHEDULES.md (Catch-up of missed
// slots).
func RunScheduled(db *gorm.DB, job string, schedule ormlock.Schedule, fn func(tx *gorm.DB) error, opts ...ormlock.Option) error {
	return verbs.RunScheduled(ctxOf(db), binder{db}, pkg, job, schedule, fn == nil, opts, func(slot time.Time) error { return RunOnce(db, job, slot, fn, opts...) })
}

// Migrate creates the RunOnce ledger table, and the fence table of
// [ormlock.WithFencing], if they do not exist; calling it again is harmless,
// and replicas may all call it at start-up (it holds a lock on the table
// name meanwhile). The table is "ormlock_runs" or [ormlock.WithLedgerTable]'s
// (per call or a plugin default); a name that is not a plain identifier is an
// error wrapping [ormlock.ErrInvalidArgument]. A table of an earlier version
// is upgraded in place. It runs on its own connection of db's primary pool,
// not in db's transaction. See docs/PROTOCOL.md (The ledger).
func Migrate(db *gorm.DB, opts ...ormlock.Option) error {
	return verbs.Migrate(ctxOf(db), binder{db}, pkg, opts)
}

// Holder asks the database who holds the lock named by key: the answer to
// "why didn't my job run?" when a verb returned [ormlock.ErrNotAcquired]. The
// key is resolved as the verbs resolve it (the plugin's or the call's
// namespace); the context is GORM's (db.WithContext). A free lock is
// HolderInfo.Held false with a nil error. The answer is a snapshot, and
// inside one PostgreSQL transaction it stays that of the first lookup. See
// docs/PROTOCOL.md (Holder) and [ormlock.HolderInfo] for each field.
func Holder[K ormlock.KeyType](db *gorm.DB, key K, opts ...ormlock.Option) (ormlock.HolderInfo, error) {
	h, err := verbs.Holder(ctxOf(db), binder{db}, pkg, keys.Of[ormlock.Key](key), opts)
	return ormlock.HolderInfo(h), err
}

// Holders returns every holder of key, whatever its shape: each holder of
// a key (several for a [ormlock.Shared] key), of each key of an
// [ormlock.All], of each slot of an [ormlock.Semaphore], each naming its
// key, mode and slot ([ormlock.HolderInfo] Key, Shared, Slot); none when
// nobody holds it. The context is GORM's (db.WithContext).
func Holders[K ormlock.KeyType](db *gorm.DB, key K, opts ...ormlock.Option) ([]ormlock.HolderInfo, error) {
	return lockproto.HoldersAs[ormlock.HolderInfo](verbs.Holders(ctxOf(db), binder{db}, pkg, keys.Of[ormlock.Key](key), opts))
}

// Runs returns the last limit runs of job from the ledger table, newest slot
// first: who ran which slot, when, for how long, and with which error, in the
// namespace in effect ([ormlock.WithNamespace], per call or a plugin
// default). It reads from the primary (with dbresolver), or from db's
// transaction when db is inside one. limit must be positive. A 'running'
// run whose lock nobody holds is reported stale ([ormlock.Run] Stale). See
// docs/PROTOCOL.md (The ledger).
func Runs(db *gorm.DB, job string, limit int, opts ...ormlock.Option) ([]ormlock.Run, error) {
	return ledger.RunsAs[ormlock.Run](verbs.Runs(ctxOf(db), binder{db}, pkg, job, limit, opts))
}

// Prune deletes the ledger rows of finished runs ('done' or 'failed') and
// of stale ones ('running' with their lock free: [ormlock.Run] Stale) whose
// slot is more than olderThan before now by the database server's clock
// (read first; catch-up judges its window by it too), and returns how many
// it deleted (so far, when it stops at an error or when db's context ends).
// It never deletes a 'running' claim whose lock is held, works in short
// batches, and prunes only the namespace in effect. olderThan must exceed
// the longest period of the jobs plus the latest a trigger may come, or a
// pruned slot runs again. db must not be inside a transaction. An
// olderThan shorter than the catch-up window of [ormlock.WithCatchUp],
// given with it, plus 1 minute is refused. It also deletes the rate
// table's idle tokens and the lease table's rows ([ormlock.WithLease]) of
// every namespace whose lease expired more than olderThan ago (not counted
// in the result); each key's epoch lives on in its fencing counter, so a
// later grant's epoch is still above the pruned one. See docs/PROTOCOL.md
// (The ledger; Leases) and docs/SCHEDULES.md (Clocks of catch-up and
// Prune).
func Prune(db *gorm.DB, olderThan time.Duration, opts ...ormlock.Option) (int64, error) {
	return verbs.Prune(ctxOf(db), binder{db}, pkg, olderThan, opts)
}

// AdvanceFences adds by to every fencing counter of the namespace in
// effect and returns how many it moved. Call it once after promoting an
// asynchronous replica (or a MySQL replica without semi-synchronous
// replication), which may lack the last tokens the old primary issued:
// every token issued afterwards is greater than those, as long as by
// exceeds the tokens issued per key in the replication lag (a generous
// margin such as 1,000,000 costs nothing). by is in 1..2^52. db must not
// be inside a transaction. The command is ormlock fence advance --by N.
// See docs/PROTOCOL.md (Failover).
func AdvanceFences(db *gorm.DB, by int64, opts ...ormlock.Option) (int64, error) {
	return verbs.AdvanceFences(ctxOf(db), binder{db}, pkg, by, opts)
}

// RunOnce runs fn at most once per (job, slot) across every instance that
// shares the database, and records the run in the ledger table ([Migrate]).
// slot is the scheduled time, never time.Now(): take it from an
// [ormlock.Schedule], or call [RunScheduled] (a slot with a fraction of a
// second is refused). fn reads the slot with
// ormlock.Slot(tx.Statement.Context). A slot already done returns
// [ormlock.ErrAlreadyDone]; by default fn's work and the ledger row commit in
// one transaction, and [ormlock.WithClaim] selects claim mode for long jobs.
// A job name is valid UTF-8 without NUL bytes or a trailing space, at most
// 191 characters; bad input wraps [ormlock.ErrInvalidArgument].
// Protocol, claim mode and nesting: docs/PROTOCOL.md (The verbs on each
// server, RunOnce).
func RunOnce(db *gorm.DB, job string, slot time.Time, fn func(tx *gorm.DB) error, opts ...ormlock.Option) error {
	return verbs.RunOnceOf[*gorm.DB](ctxOf(db), driver{binder{db}, fn}, pkg, job, slot, fn == nil, opts)
}

// Usage reads the tokens of the rate limit key ([ormlock.Rate]) in use,
// by the database server's clock, without taking one ([ormlock.RateUsage]);
// any other key is [ormlock.ErrInvalidArgument]. The context is GORM's
// (db.WithContext).
func Usage(db *gorm.DB, key ormlock.Key, opts ...ormlock.Option) (ormlock.RateUsage, error) {
	return verbs.Usage(ctxOf(db), binder{db}, pkg, key, opts)
}
