// Command serve starts one private test server with internal/testdb (the
// binaries chosen as for the tests, e.g. ORMLOCK_TEST_PG_BINDIR), prints its
// port and DSN on one line, and serves until its standard input closes or it
// is signalled. scripts/compat-pgpool puts a pgpool-II in front of it.
//
//	go run ./internal/testdb/cmd/serve -kind postgres
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/ormlock/ormlock/internal/testdb"
)

func main() {
	kind := flag.String("kind", "postgres", "postgres, pgbouncer or mariadb")
	flag.Parse()
	s, err := testdb.StartServer(testdb.Kind(*kind))
	if err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		os.Exit(1)
	}
	fmt.Printf("%d %s\n", s.Port(), s.DSN())
	_ = testdb.WaitForStop(nil)
	if err := s.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		os.Exit(1)
	}
}
