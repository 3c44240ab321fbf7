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
	"io"
	"os"
	"os/signal"
	"syscall"

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
	}
	if err := s.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		os.Exit(1)
	}
}
