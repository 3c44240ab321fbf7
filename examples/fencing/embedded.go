package main

import "github.com/ormlock/ormlock/examples/internal/embedded"

// startEmbedded starts the default database: go-mysql-server's in-process MySQL
// server with its in-memory storage, on a free loopback port, reached over
// TCP by the ordinary MySQL driver exactly as a real server would be. It
// needs nothing but Go, and keeps nothing after the program exits.
//
// What ormlock needs of it is listed in ../crondedup/README.md; fencing
// also needs LAST_INSERT_ID(expr) in ON DUPLICATE KEY UPDATE to reach the
// client as the result's insert id, and KILL to end a connection (and free
// its named locks): the example's test runs it on this engine.
func startEmbedded() (*embedded.DB, error) { return embedded.Start("fencing") }
