package webui

import (
	"github.com/ormlock/ormlock/internal/ledger"
	"github.com/ormlock/ormlock/internal/lockproto"
)

// JobsSQL is the statement that lists a page of jobs, for the EXPLAIN test.
func JobsSQL(dialect, table string) string {
	d := lockproto.Postgres
	if dialect == "mysql" {
		d = lockproto.MySQL
	}
	t, err := ledger.NewTable(d, table)
	if err != nil {
		panic(err)
	}
	return t.JobsSQL()
}
