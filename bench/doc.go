// Package bench compares ormlock's verbs side by side with the other ways a
// Go service takes a distributed lock, on real servers, in one run:
//
//   - gormlock.Transaction, entlock.Transaction and gormlock.Session;
//   - the same protocol hand-written with database/sql (PostgreSQL: BEGIN,
//     pg_try_advisory_xact_lock, COMMIT; MySQL/MariaDB: a pinned connection,
//     GET_LOCK, BEGIN, COMMIT, RELEASE_LOCK), the baseline of every ratio;
//   - a lease table in the style of gocron-gorm-lock (INSERT a row with a
//     unique name to take the lock, DELETE it to release);
//   - bsm/redislock on a loopback Redis;
//   - a plain GORM transaction and a plain ent transaction that take no
//     lock, as references for what each stack itself costs.
//
// The databases ([Target]) are PostgreSQL directly, PostgreSQL behind
// PgBouncer in transaction mode, and MariaDB with and without the driver's
// interpolateParams=true. Each contender runs under four [Load]s: one and
// eight goroutines on distinct keys (uncontended), one goroutine trying a key
// that another holder keeps (every try loses: how fast a loser returns), and
// eight goroutines on one key (contended, try-once).
//
// Every attempt is one whole use of the lock: take it try-once, run an empty
// critical section, release it. The metrics are acquisitions per second, the
// 50th and 99th percentile latency of an attempt, and heap allocations per
// attempt (runtime.MemStats.Mallocs over the measured window, divided by the
// attempts).
//
// With a [Link] (an in-process TCP proxy adding a fixed delay each way),
// every connection crosses a simulated network instead of loopback, where
// round trips, not the server's or the client's CPU, decide.
//
// The full comparison is the command in cmd/ormlockbench (make bench); the
// BenchmarkXxx functions of this package give the core comparisons in the
// go test -bench form, and TestSmoke runs each contender a few times.
//
// This is a separate module so that its dependencies (Redis clients, the
// plotting library) never reach the library's go.mod.
package bench
