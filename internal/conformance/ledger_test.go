package conformance_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/testdb"
)

// A bad ledger table name is refused before anything is sent, by Migrate,
// RunOnce (either mode) and Runs; a missing table is reported with a hint.
// A bad name as the adapter's default (GORM's plugin, entlock.Wrap) is
// each adapter's own test.
func TestLedgerBadTableNames(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		// a pool that is already closed: any statement would fail with
		// "sql: database is closed", so ErrInvalidArgument proves that
		// nothing was sent
		closed := testdb.Open(t, k)
		closed.Close()
		r := a.on(t, k.Dialect(), closed)
		fn := func(txn) error { return errors.New("fn called") }
		for _, name := range []string{"runs; DROP TABLE x", "", strings.Repeat("a", 64), "1runs", "a-b", `r"s`, "r`s", "schema.runs", "ré"} {
			opt := ormlock.WithLedgerTable(name)
			if err := r.Migrate(ctx, opt); !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "table name") {
				t.Errorf("Migrate(%q): %v, want ErrInvalidArgument naming the table", name, err)
			}
			for _, mode := range []ormlock.Option{nil, ormlock.WithClaim()} {
				if err := r.RunOnce(ctx, "j", testdb.Slot(0), fn, opt, mode); !errors.Is(err, ormlock.ErrInvalidArgument) {
					t.Errorf("RunOnce with table %q: %v", name, err)
				}
			}
			if _, err := r.Runs(ctx, "j", 1, opt); !errors.Is(err, ormlock.ErrInvalidArgument) {
				t.Errorf("Runs with table %q: %v", name, err)
			}
		}
		if err := config.ValidIdentifier("t", strings.Repeat("a", 63)); err != nil {
			t.Errorf("63-byte name rejected: %v", err)
		}
		// a missing table is reported with a hint
		live := openRunner(t, a, k)
		for _, mode := range []ormlock.Option{nil, ormlock.WithClaim()} {
			err := live.RunOnce(ctx, "j-"+t.Name(), testdb.Slot(0), fn, ormlock.WithLedgerTable("no_such_ledger"), mode)
			if err == nil || !strings.Contains(err.Error(), "create it with Migrate") {
				t.Errorf("missing table: %v", err)
			}
		}
		if _, err := live.Runs(ctx, "j", 1, ormlock.WithLedgerTable("no_such_ledger")); err == nil || !strings.Contains(err.Error(), "create it with Migrate") {
			t.Errorf("Runs on a missing table: %v", err)
		}
	})
}
