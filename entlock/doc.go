// Package entlock takes ormlock's distributed locks inside ent's own
// transactions: PostgreSQL advisory locks and MySQL/MariaDB named locks.
//
// ent generates its client per project, so this package cannot name your
// *ent.Tx. It works through a driver wrapper instead, and generic helpers
// that infer the transaction type from your client:
//
//	drv := entlock.Wrap(entsql.OpenDB(dialect.Postgres, db))
//	client := ent.NewClient(ent.Driver(drv))
//
//	err := entlock.Transaction(ctx, client, "daily-settlement", func(tx *ent.Tx) error {
//		return tx.Settlement.Create().SetDay(day).Exec(ctx)
//	})
//	switch {
//	case errors.Is(err, ormlock.ErrNotAcquired):
//		// another replica holds the lock: nothing to do
//	case err != nil:
//		return err
//	}
//
// No code generation feature is needed, and both dialects are supported.
//
// # The wrapper
//
// [Wrap] returns a [Driver] that passes everything ent does (queries,
// client.Tx, client.BeginTx, migrations, Close) to the wrapped driver
// unchanged. The verbs reach it through the context of client.Tx: the
// generated client hands its context to its driver, and the wrapper then
// starts the transaction with the lock held. If the client's driver is not
// wrapped, the verbs return [ErrNotWrapped] and never run fn unlocked.
// A driver of another dialect (sqlite3, ...) or one without a *sql.DB makes
// the verbs return [ormlock.ErrUnsupportedDialect]; [Driver.Err] reports it
// at start-up. Options given to Wrap are the defaults of every verb called
// through that driver, like the GORM plugin's.
//
// The verbs: [Transaction] runs fn in one transaction while the lock is
// held; [Session] (on the client or the *Driver) holds the lock on a
// dedicated connection while a long fn uses the pool; [Lead] elects one
// leader per key among the replicas that call it and runs fn on the leader
// until leadership is lost, then campaigns again; [RunOnce] runs a job at
// most once per (job, slot) with a ledger ([Migrate], [Runs], [Prune],
// [RunScheduled]), shared with the other adapters; [Holder] says who holds
// a lock.
//
// What happens on each server, on cancellation, in nested calls (ent has
// none: a call inside fn is an independent transaction), at each isolation
// level and deadline, and how to size the pool is described once, for the
// four adapters alike, in docs/PROTOCOL.md.
//
// With [ormlock.WithFencing] every acquisition gets a fencing token, greater
// than any earlier one of its key and committed before fn runs. ent's
// generated Tx has no context fn could read, so fn reads it with
// [FencingToken] on the tx it was given (Transaction, RunOnce), and with
// [ormlock.FencingToken] on its ctx in a Session (docs/PROTOCOL.md, Fencing).
//
// With pgx on PostgreSQL, BEGIN and the lock travel in one message, so a
// locked transaction makes the round trips of an unlocked one; other drivers
// (and GORM's PrepareStmt) send them apart (docs/PROTOCOL.md, Round trips).
package entlock
