// Command embeddedmysql serves go-mysql-server's in-memory MySQL engine on a
// loopback port for the compatibility run (make compat): it prints the
// go-sql-driver/mysql DSN of database "ormlock" on its first line of output,
// for ORMLOCK_TEST_MYSQL_DSN, and serves until it is signalled or its
// standard input closes.
package main

import (
	"fmt"
	"os"

	"github.com/ormlock/ormlock/examples/internal/embedded"
	"github.com/ormlock/ormlock/internal/testdb"
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

	if err := testdb.WaitForStop(e.Done()); err != nil {
		return err
	}
	return e.Close()
}
