// Command startuptime starts each kind of test database server once, one
// after the other, prints how long each took to be ready, and stops them.
// Its numbers document the start-up cost of the tests in the README.
//
//	go run ./internal/testdb/cmd/startuptime
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/ormlock/ormlock/internal/testdb"
)

func main() {
	what := map[testdb.Kind]string{
		testdb.Postgres:  "initdb+start",
		testdb.PgBouncer: "initdb+start of its postgres, then pgbouncer",
		testdb.MariaDB:   "install-db+start",
	}
	failed := false
	total := time.Now()
	for _, k := range testdb.Kinds() {
		t0 := time.Now()
		s, err := testdb.StartServer(k)
		d := time.Since(t0)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", k, err)
			failed = true
			continue
		}
		t1 := time.Now()
		cerr := s.Close()
		fmt.Printf("%s: %s %.1fs (stop %.1fs)\n", k, what[k], d.Seconds(), time.Since(t1).Seconds())
		if cerr != nil {
			fmt.Fprintf(os.Stderr, "%s: stop: %v\n", k, cerr)
			failed = true
		}
	}
	fmt.Printf("total %.1fs\n", time.Since(total).Seconds())
	if failed {
		os.Exit(1)
	}
}
