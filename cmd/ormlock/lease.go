package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/ormlock/ormlock"
)

// printMigration prints ormlock.MigrateSQL's statements for dialect
// ("postgres" or "mysql"), or for the dialect of c's DSN when it is "":
// the DSN is parsed, never dialed.
func printMigration(c *common, dialect string, opts []ormlock.Option, stdout io.Writer) error {
	if dialect == "" {
		if c.dsn == "" {
			return usagef("--print needs --dialect (postgres or mysql) or a DSN (--dsn, $ORMLOCK_DSN) to read the dialect from")
		}
		db, srv, err := openSQL(c.dsn) // opens no connection
		if err != nil {
			return err
		}
		db.Close()
		dialect = strings.ToLower(srv.dialect)
	}
	stmts, err := ormlock.MigrateSQL(dialect, opts...)
	if err != nil {
		return usagef("--dialect %q: %s (postgres, or mysql for MySQL and MariaDB)", dialect, bare(err))
	}
	for _, s := range stmts {
		if _, err := fmt.Fprintf(stdout, "%s;\n\n", s); err != nil {
			return err
		}
	}
	return nil
}

// withToken is env with ORMLOCK_FENCING_TOKEN set to the fencing token fn's
// ctx carries, when it carries one: a lease's epoch (ormlock run --lease,
// ormlock lead --lease), or a term's token (ormlock lead --fencing).
func withToken(ctx context.Context, env []string) []string {
	token, ok := ormlock.FencingToken(ctx)
	if !ok {
		return env
	}
	return append(env[:len(env):len(env)], "ORMLOCK_FENCING_TOKEN="+strconv.FormatInt(token, 10))
}
