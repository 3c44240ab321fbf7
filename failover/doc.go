// Package failover tests what ormlock's promises are worth when the server
// behind a pool changes: a PostgreSQL primary with a streaming standby
// (synchronous and asynchronous) promoted while holders are mid-fn, a
// MariaDB primary and replica, and two- and three-node Galera clusters,
// each started by internal/testdb from the machine's packages; and leases
// (ormlock.WithLease) on them: every verb across Galera nodes, a node
// killed or with its clock skewed (libfaketime), epochs across a
// PostgreSQL promotion, synchronous and asynchronous, and a promoted
// server whose clock runs ahead. It has no API: everything
// is in its tests, which take minutes and so run only when ORMLOCK_TOPOLOGY
// is set (make compat sets it); without it they skip, saying so. Their
// measured figures are the "figure:" lines of the verbose output, and
// docs/PROTOCOL.md (Failover) quotes them.
package failover
