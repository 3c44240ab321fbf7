// Package chaos is ormlock's reliability and security suite. It has no API:
// everything is in its tests (package chaos_test), which run against real
// servers started by internal/testdb (PostgreSQL, PgBouncer in transaction
// mode, MariaDB), and in cmd/holder, a small program that takes a lock and
// waits to be killed.
//
// The faults (kill -9 of a holder process, a connection terminated by the
// server mid-fn, server and pooler restarts under load, small pools, a soak
// of mixed operations, fuzzed key names) and the security checks (lock names
// bound as parameters, MySQL's server-wide lock names and namespaces, least
// privilege) are listed with their measured results in docs/RELIABILITY.md.
//
// The short versions run with the rest of the library's tests (go test ./...
// and make test). make chaos runs the long ones (ORMLOCK_SOAK=1): more kill
// rounds, a longer soak, longer restart runs.
package chaos
