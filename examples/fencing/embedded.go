package main

import (
	"fmt"
	"io"
	"net"

	sqle "github.com/dolthub/go-mysql-server"
	"github.com/dolthub/go-mysql-server/memory"
	"github.com/dolthub/go-mysql-server/server"
	gmssql "github.com/dolthub/go-mysql-server/sql"
	"github.com/sirupsen/logrus"
)

// embeddedDB is the default database: go-mysql-server's in-process MySQL
// server with its in-memory storage, on a free loopback port, reached over
// TCP by the ordinary MySQL driver exactly as a real server would be. It
// needs nothing but Go, and keeps nothing after the program exits.
//
// What ormlock needs of it is listed in ../crondedup/README.md; fencing
// also needs LAST_INSERT_ID(expr) in ON DUPLICATE KEY UPDATE to reach the
// client as the result's insert id, and KILL to end a connection (and free
// its named locks): the example's test runs it on this engine.
type embeddedDB struct {
	srv  *server.Server
	addr string
	done chan error
}

const embeddedName = "fencing"

// startEmbedded starts the server. Its own logging (logrus, Info by
// default) is silenced: it would interleave with the example's output.
func startEmbedded() (*embeddedDB, error) {
	logrus.SetOutput(io.Discard)
	db := memory.NewDatabase(embeddedName)
	db.BaseDatabase.EnablePrimaryKeyIndexes()
	pro := memory.NewDBProvider(db)
	engine := sqle.NewDefault(pro)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("embedded MySQL: listen: %w", err)
	}
	srv, err := server.NewServer(server.Config{Protocol: "tcp", Listener: l}, engine, gmssql.NewContext, memory.NewSessionBuilder(pro), nil)
	if err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("embedded MySQL: %w", err)
	}
	e := &embeddedDB{srv: srv, addr: l.Addr().String(), done: make(chan error, 1)}
	go func() { e.done <- srv.Start() }()
	return e, nil
}

// DSN is the go-sql-driver/mysql DSN of the embedded database.
func (e *embeddedDB) DSN() string { return "root@tcp(" + e.addr + ")/" + embeddedName }

// Close stops the server.
func (e *embeddedDB) Close() error {
	err := e.srv.Close()
	<-e.done
	return err
}
