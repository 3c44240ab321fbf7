// Package embedded starts go-mysql-server's in-process MySQL server with its
// in-memory storage, on a free loopback port, reached over TCP by the
// ordinary MySQL driver exactly as a real server would be. It needs nothing
// but Go and keeps nothing after the program exits. The examples use it as
// their default database (what each needs of the engine is in its own doc).
package embedded

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

// DB is a running embedded server with one database.
type DB struct {
	srv  *server.Server
	name string
	addr string
	done chan error
}

// Start starts a server with one database, name. The engine's own logging
// (logrus, Info by default) is silenced: it would interleave with the
// example's output.
func Start(name string) (*DB, error) {
	logrus.SetOutput(io.Discard)
	db := memory.NewDatabase(name)
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
	e := &DB{srv: srv, name: name, addr: l.Addr().String(), done: make(chan error, 1)}
	go func() { e.done <- srv.Start() }()
	return e, nil
}

// Addr is the server's host:port.
func (e *DB) Addr() string { return e.addr }

// DSN is the go-sql-driver/mysql DSN of the database.
func (e *DB) DSN() string { return "root@tcp(" + e.addr + ")/" + e.name }

// Done receives the server's exit error once it stops on its own.
func (e *DB) Done() <-chan error { return e.done }

// Close stops the server.
func (e *DB) Close() error {
	err := e.srv.Close()
	<-e.done
	return err
}
