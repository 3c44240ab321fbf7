package ledger_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/ledger"
	"github.com/ormlock/ormlock/internal/lockproto"
)

// The statements against real servers are tested through gormlock (and
// entlock); these are the pure parts.

func TestErrorText(t *testing.T) {
	if got := ledger.ErrorText("short"); got != "short" {
		t.Fatalf("ErrorText(short) = %q", got)
	}
	if got := ledger.ErrorText("a\x00b\xffc"); got != "ab\uFFFDc" {
		t.Fatalf("ErrorText cleans to %q", got)
	}
	for _, n := range []int{3999, 4000, 4001, 10000} {
		s := strings.Repeat("€", n/3+1)[:n] // may end mid-character
		got := ledger.ErrorText(s)
		if len(got) > 4000 || !utf8.ValidString(got) {
			t.Fatalf("ErrorText of %d bytes: %d bytes, valid %v", n, len(got), utf8.ValidString(got))
		}
	}
	if got := ledger.ErrorText(strings.Repeat("x", 5000)); !strings.HasSuffix(got, "…[truncated]") {
		t.Fatalf("no truncation mark: %q", got[len(got)-20:])
	}
}

func TestValidate(t *testing.T) {
	for _, job := range []string{"", "a\x00", "\xff", strings.Repeat("é", ledger.MaxJobLen+1), "report ", " "} {
		if err := ledger.ValidateJob("X", job); !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "X: ") {
			t.Errorf("ValidateJob(%.20q) = %v", job, err)
		}
	}
	if err := ledger.ValidateJob("X", strings.Repeat("é", ledger.MaxJobLen)); err != nil {
		t.Errorf("191 characters rejected: %v", err)
	}
	for _, s := range []time.Time{{}, time.Date(999, 12, 31, 0, 0, 0, 0, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 1, 1, 0, 0, 0, 1, time.UTC), time.Date(2026, 1, 1, 0, 0, 0, 500_000_000, time.UTC)} {
		if err := ledger.ValidateSlot("X", s); !errors.Is(err, ormlock.ErrInvalidArgument) {
			t.Errorf("ValidateSlot(%v) = %v", s, err)
		}
	}
	err := ledger.ValidateSlot("X", time.Date(2026, 1, 1, 0, 0, 0, 1000, time.UTC))
	if err == nil || !strings.Contains(err.Error(), "schedule.Slot(t)") || !strings.Contains(err.Error(), "RunScheduled") {
		t.Errorf("sub-second slot: %v, want a hint at schedule.Slot(t) and RunScheduled", err)
	}
	if err := ledger.ValidateSlot("X", time.Date(2026, 1, 1, 0, 0, 1, 0, time.FixedZone("x", 3600))); err != nil {
		t.Errorf("a whole second refused: %v", err)
	}
	if _, err := ledger.NewTable(lockproto.Postgres, "runs; DROP TABLE x"); !errors.Is(err, ormlock.ErrInvalidArgument) {
		t.Errorf("NewTable accepted an injection: %v", err)
	}
	if _, err := ledger.NewTable(0, "runs"); !errors.Is(err, ormlock.ErrUnsupportedDialect) {
		t.Errorf("NewTable with no dialect: %v", err)
	}
	if o := ledger.DefaultOwner(); !strings.Contains(o, "/") {
		t.Errorf("DefaultOwner = %q, want hostname/pid", o)
	}
}

func TestCreateSQLQuotes(t *testing.T) {
	pg, _ := ledger.NewTable(lockproto.Postgres, "Runs_1")
	my, _ := ledger.NewTable(lockproto.MySQL, "Runs_1")
	if !strings.Contains(pg.CreateSQL(), `CREATE TABLE IF NOT EXISTS "Runs_1" (`) {
		t.Errorf("postgres: %s", pg.CreateSQL())
	}
	if !strings.Contains(my.CreateSQL(), "CREATE TABLE IF NOT EXISTS `Runs_1` (") {
		t.Errorf("mysql: %s", my.CreateSQL())
	}
}

// The prune index's name: the table's with "_ns_slot" while that fits in 63
// bytes, else shortened with a hash of the whole name, distinct for names
// that share their first 46 bytes; MySQL's CREATE TABLE declares it.
func TestIndexName(t *testing.T) {
	name := func(table string) string {
		tbl, err := ledger.NewTable(lockproto.Postgres, table)
		if err != nil {
			t.Fatal(err)
		}
		return tbl.IndexName()
	}
	if got := name("ormlock_runs"); got != "ormlock_runs_ns_slot" {
		t.Errorf("IndexName(ormlock_runs) = %q", got)
	}
	fits := strings.Repeat("a", 55)
	if got := name(fits); got != fits+"_ns_slot" {
		t.Errorf("IndexName of 55 bytes = %q", got)
	}
	long1, long2 := strings.Repeat("b", 62)+"1", strings.Repeat("b", 62)+"2"
	n1, n2 := name(long1), name(long2)
	if len(n1) != 63 || len(n2) != 63 || n1 == n2 || !strings.HasPrefix(n1, strings.Repeat("b", 46)+"_") || !strings.HasSuffix(n1, "_ns_slot") {
		t.Errorf("IndexName of 63-byte names: %q, %q", n1, n2)
	}
	if got := name(strings.Repeat("c", 56)); len(got) != 63 || !strings.HasPrefix(got, strings.Repeat("c", 46)+"_") {
		t.Errorf("IndexName of 56 bytes = %q", got)
	}
	my, _ := ledger.NewTable(lockproto.MySQL, "Runs_1")
	if !strings.Contains(my.CreateSQL(), "KEY `Runs_1_ns_slot` (namespace, slot)") {
		t.Errorf("mysql: %s", my.CreateSQL())
	}
}

// The job-name limit is not a name of the root package: each adapter's
// RunOnce doc states it, and must state the one the ledger enforces.
func TestJobLimitDocumented(t *testing.T) {
	want := fmt.Sprintf("at most %d characters", ledger.MaxJobLen)
	for _, file := range []string{"../../gormlock/verbs.go", "../../entlock/runonce.go", "../../sqllock/sqllock.go", "../../pgxlock/pgxlock.go"} {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(strings.Fields(strings.ReplaceAll(string(src), "//", "")), " "), want) {
			t.Errorf("%s: RunOnce's doc does not say %q", file, want)
		}
	}
}

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
