package lockproto

import (
	"errors"
	"testing"

	"github.com/ormlock/ormlock/internal/errs"
)

// sqlStateErr is a PostgreSQL driver's error as SQLState reads it.
type sqlStateErr string

func (e sqlStateErr) Error() string    { return "ERROR: (SQLSTATE " + string(e) + ")" }
func (e sqlStateErr) SQLState() string { return string(e) }

// TestServerOf checks, without a server, that each dialect gets its own
// Server and an unknown one an error, and what each Server says of the
// facts that need no round trip.
func TestServerOf(t *testing.T) {
	if _, err := ServerOf(0); !errors.Is(err, errs.ErrUnsupportedDialect) {
		t.Fatalf("ServerOf(0): %v, want ErrUnsupportedDialect", err)
	}
	if got := Dialect(0).String(); got != "unknown" {
		t.Errorf("Dialect(0).String() = %q", got)
	}
	cases := []struct {
		d              Dialect
		name, quoted   string
		table, column  error
		pick           string
		pool           bool
		product, other string // ServerProduct of "x MariaDB x", of "CockroachDB v25.1"
	}{
		{Postgres, "postgres", `"t"`, sqlStateErr("42P01"), sqlStateErr("42703"), "pg", true, "postgresql", "cockroachdb"},
		{MySQL, "mysql", "`t`", errors.New("Error 1146 (42S02): Table 'x.t' doesn't exist"), errors.New("Error 1054 (42S22): Unknown column 'namespace'"), "my", false, "mariadb", "mysql"},
	}
	for _, c := range cases {
		s, err := ServerOf(c.d)
		if err != nil {
			t.Fatalf("ServerOf(%v): %v", c.d, err)
		}
		if s.Name() != c.name || c.d.String() != c.name {
			t.Errorf("%v: Name %q, String %q, want %q", c.d, s.Name(), c.d.String(), c.name)
		}
		if got := s.Quote("t"); got != c.quoted {
			t.Errorf("%v: Quote = %s, want %s", c.d, got, c.quoted)
		}
		if !s.MissingTable(c.table) || s.MissingTable(c.column) || !s.MissingColumn(c.column) || s.MissingColumn(c.table) {
			t.Errorf("%v: MissingTable/MissingColumn misclassify %v and %v", c.d, c.table, c.column)
		}
		if got := PerServer(s, "pg", "my"); got != c.pick {
			t.Errorf("%v: PerServer picked %q, want %q", c.d, got, c.pick)
		}
		if s.tokenOnPool() != c.pool {
			t.Errorf("%v: tokenOnPool = %v", c.d, s.tokenOnPool())
		}
		if got := ServerProduct(c.d, "x MariaDB x"); got != c.product {
			t.Errorf("%v: ServerProduct(MariaDB) = %q, want %q", c.d, got, c.product)
		}
		if got := ServerProduct(c.d, "CockroachDB CCL v25.1.0"); got != c.other {
			t.Errorf("%v: ServerProduct(CockroachDB) = %q, want %q", c.d, got, c.other)
		}
	}
}
