// Package gormlock takes ormlock's distributed locks inside GORM's own
// transactions: PostgreSQL advisory locks and MySQL/MariaDB named locks.
//
//	err := gormlock.Transaction(db.WithContext(ctx), "daily-settlement", func(tx *gorm.DB) error {
//		return tx.Create(&Settlement{Day: day}).Error
//	})
//	switch {
//	case errors.Is(err, ormlock.ErrNotAcquired):
//		// another replica holds the lock: nothing to do
//	case err != nil:
//		return err
//	}
//
// The verbs: [Transaction] runs fn in one transaction while the lock is
// held; [Session] holds the lock on a dedicated connection while a long fn
// uses the pool; [Lead] elects one leader per key among the replicas that
// call it and runs fn on the leader until leadership is lost, then
// campaigns again; [RunOnce] runs a job at most once per (job, slot) with a
// ledger ([Migrate], [Runs], [Prune], [RunScheduled]); [Holder] says who
// holds a lock. The context is GORM's (db.WithContext(ctx)).
//
// db.Use([New](opts...)) sets defaults for every call on that db and rejects
// an invalid option or an unsupported dialect at registration; it fails
// closed (every verb then returns the registration's error). With
// gorm.io/plugin/dbresolver the lock always runs on the primary.
//
// What happens on each server, on cancellation, in nested transactions, at
// each isolation level and deadline, and how to size the pool is described
// once, for the four adapters alike, in docs/PROTOCOL.md.
//
// With pgx on PostgreSQL, BEGIN and the lock travel in one message, so a
// locked transaction makes the round trips of an unlocked one; other drivers
// (and GORM's PrepareStmt) send them apart (docs/PROTOCOL.md, Round trips).
//
// With [ormlock.WithFencing] every acquisition gets a fencing token, greater
// than any earlier one of its key and committed before fn runs; fn reads it
// with [FencingToken] on its tx (Transaction, RunOnce) or
// [ormlock.FencingToken] on its ctx (Session), and [CheckFenced] checks a
// fenced UPDATE (docs/PROTOCOL.md, Fencing).
package gormlock
