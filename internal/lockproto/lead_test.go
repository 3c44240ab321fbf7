package lockproto_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/lockproto"
)

// mysqlErr has the text go-sql-driver/mysql gives a server error.
type mysqlErr struct{ n int }

func (e mysqlErr) Error() string { return fmt.Sprintf("Error %d (28000): denied", e.n) }

func TestPermanent(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("dial tcp 127.0.0.1:5432: connect: connection refused"), false},
		{fmt.Errorf("x: %w", ormlock.ErrNotAcquired), false},
		{fmt.Errorf("x: %w", ormlock.ErrInvalidKey), true},
		{fmt.Errorf("x: %w", ormlock.ErrInvalidArgument), true},
		{fmt.Errorf("x: %w", ormlock.ErrUnsupportedDialect), true},
		{&pgconn.PgError{Code: "28P01"}, true},                                                             // invalid_password
		{&pgconn.PgError{Code: "3D000"}, true},                                                             // invalid_catalog_name
		{&pgconn.PgError{Code: "42501"}, true},                                                             // insufficient_privilege
		{&pgconn.PgError{Code: "57P01"}, false},                                                            // admin_shutdown
		{&pgconn.PgError{Code: "53300"}, false},                                                            // too_many_connections
		{&pgconn.PgError{Code: "26000", Message: `prepared statement "stmtcache_1" does not exist`}, true}, // behind a pooler
		{&pgconn.PgError{Code: "26000", Message: `cursor "c" does not exist`}, false},
		{mysqlErr{1045}, true},
		{mysqlErr{1049}, true},
		{mysqlErr{1040}, false}, // too many connections
		{mysqlErr{2013}, false},
	} {
		if got := lockproto.Permanent(c.err); got != c.want {
			t.Errorf("Permanent(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestPGOwnerSQL(t *testing.T) {
	for _, c := range []struct{ owner, want string }{
		{"replica-1", "SET LOCAL application_name = 'replica-1'"},
		{"o'brien", "SET LOCAL application_name = 'o''brien'"},
		{`back\slash`, `SET LOCAL application_name = 'back\slash'`},
		{strings.Repeat("a", 70), "SET LOCAL application_name = '" + strings.Repeat("a", 63) + "'"},
		// 62 ASCII bytes, then a 2-byte character that would end at byte 64
		{strings.Repeat("a", 62) + "é", "SET LOCAL application_name = '" + strings.Repeat("a", 62) + "'"},
	} {
		if got := lockproto.PGOwnerSQL(c.owner); got != c.want {
			t.Errorf("PGOwnerSQL(%q) = %q, want %q", c.owner, got, c.want)
		}
	}
}

func TestJitter(t *testing.T) {
	for _, d := range []time.Duration{0, time.Millisecond, 100 * time.Millisecond, 5 * time.Second} {
		for range 100 {
			if j := lockproto.Jitter(d); j < d-d/5 || j > d+d/5 {
				t.Fatalf("Jitter(%v) = %v, outside ±20%%", d, j)
			}
		}
	}
}
