package main

import "github.com/ormlock/ormlock/examples/internal/embedded"

// startEmbedded starts the default database: go-mysql-server's in-process MySQL
// server with its in-memory storage, on a free loopback port, reached over
// TCP by the ordinary MySQL driver exactly as a real server would be. It
// needs nothing but Go, and keeps nothing after the program exits.
//
// What ormlock needs of it, checked against MySQL's behaviour (see
// README.md): GET_LOCK is exclusive across connections, honours its
// timeout, and frees the lock when the holding connection closes;
// RELEASE_LOCK returns 1, 0 or NULL as MySQL does; IS_USED_LOCK and
// CONNECTION_ID agree; transactions isolate and roll back; INSERT ... ON
// DUPLICATE KEY UPDATE assigns left to right and reports RowsAffected 1
// (insert), 2 (update) and 0 (no change).
func startEmbedded() (*embedded.DB, error) { return embedded.Start("crondedup") }
