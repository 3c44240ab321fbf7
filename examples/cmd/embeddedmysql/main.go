// Command embeddedmysql serves go-mysql-server's in-memory MySQL engine on a
// loopback port for the compatibility run (make compat): it prints the
// go-sql-driver/mysql DSN of database "ormlock" on its first line of output,
// for ORMLOCK_TEST_MYSQL_DSN, and serves until it is signalled or its
// standard input closes.
package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/ormlock/ormlock/examples/internal/embedded"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "embeddedmysql:", err)
		os.Exit(1)
	}
}

func run() error {
	e, err := embedded.Start("ormlock")
	if err != nil {
		return err
	}
	fmt.Printf("root@tcp(%s)/ormlock?parseTime=true&loc=UTC\n", e.Addr())

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
	case err := <-e.Done():
		return err
	}
	return e.Close()
}
