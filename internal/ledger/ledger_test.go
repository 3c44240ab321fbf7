package ledger_test

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

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
