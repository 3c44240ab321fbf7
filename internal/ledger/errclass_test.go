package ledger_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ormlock/ormlock/internal/ledger"
)

// The ledger tells a missing table and a table of an earlier shape from
// other errors by the servers' own codes, however deeply wrapped, without
// linking the MySQL driver (lockproto.MySQLErrno reads the number).
func TestErrorClasses(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("ormlock: ledger: %w", fmt.Errorf("exec: %w", err)) }
	for _, c := range []struct {
		name          string
		err           error
		table, column bool
	}{
		{"pg undefined_table", &pgconn.PgError{Code: "42P01"}, true, false},
		{"pg undefined_column", &pgconn.PgError{Code: "42703"}, false, true},
		{"pg other", &pgconn.PgError{Code: "23505"}, false, false},
		{"mysql no such table", &mysql.MySQLError{Number: 1146, SQLState: [5]byte{'4', '2', 'S', '0', '2'}}, true, false},
		{"mysql bad field", &mysql.MySQLError{Number: 1054, SQLState: [5]byte{'4', '2', 'S', '2', '2'}}, false, true},
		{"mysql other", &mysql.MySQLError{Number: 1062}, false, false},
		{"plain", errors.New("Error 1146 in the text only"), false, false},
		{"nil", nil, false, false},
	} {
		for _, err := range []error{c.err, wrap(c.err), errors.Join(errors.New("x"), c.err)} {
			if c.err == nil && err != nil {
				continue
			}
			if got := ledger.MissingTable(err); got != c.table {
				t.Errorf("%s: MissingTable(%v) = %v, want %v", c.name, err, got, c.table)
			}
			if got := ledger.MissingColumn(err); got != c.column {
				t.Errorf("%s: MissingColumn(%v) = %v, want %v", c.name, err, got, c.column)
			}
		}
	}
}
