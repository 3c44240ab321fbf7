// Command embeddedmysql serves go-mysql-server's in-memory MySQL engine on a
// loopback port for the compatibility run (make compat): it prints the
// go-sql-driver/mysql DSN of database "ormlock" on its first line of output,
// for ORMLOCK_TEST_MYSQL_DSN, and serves until it is signalled or its
// standard input closes.
package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"

	sqle "github.com/dolthub/go-mysql-server"
	"github.com/dolthub/go-mysql-server/memory"
	"github.com/dolthub/go-mysql-server/server"
	gmssql "github.com/dolthub/go-mysql-server/sql"
	"github.com/sirupsen/logrus"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "embeddedmysql:", err)
		os.Exit(1)
	}
}

func run() error {
	logrus.SetOutput(io.Discard)
	db := memory.NewDatabase("ormlock")
	db.BaseDatabase.EnablePrimaryKeyIndexes()
	pro := memory.NewDBProvider(db)
	engine := sqle.NewDefault(pro)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv, err := server.NewServer(server.Config{Protocol: "tcp", Listener: l}, engine, gmssql.NewContext, memory.NewSessionBuilder(pro), nil)
	if err != nil {
		_ = l.Close()
		return err
	}
	done := make(chan error, 1)
	go func() { done <- srv.Start() }()
	fmt.Printf("root@tcp(%s)/ormlock?parseTime=true&loc=UTC\n", l.Addr())

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	eof := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(eof)
	}()
	select {
	case <-stop:
	case <-eof:
	case err := <-done:
		return err
	}
	return srv.Close()
}
