package conformance_test

import (
	"context"
	"testing"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// Migrate creates the lease table of WithLeaseTable beside the ledger, on
// every server; MigrateSQL's statements create the same tables and run
// again without error.
func TestLeaseMigrate(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r := openRunner(t, a, k)
		ledgerName, leaseName := testdb.Table(t, k, "lm"), testdb.Table(t, k, "lml")
		opts := []ormlock.Option{ormlock.WithLedgerTable(ledgerName), ormlock.WithLeaseTable(leaseName)}
		for range 2 {
			if err := r.Migrate(ctx, opts...); err != nil {
				t.Fatalf("Migrate: %v", err)
			}
		}
		admin := testdb.AdminDB(t, k)
		var n int
		if err := admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+leaseName).Scan(&n); err != nil || n != 0 {
			t.Fatalf("lease table %s after Migrate: %d rows, %v", leaseName, n, err)
		}
		stmts, err := ormlock.MigrateSQL(k.Dialect(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range stmts {
			if _, err := admin.ExecContext(ctx, s); err != nil {
				t.Fatalf("MigrateSQL statement on migrated tables: %v\n%s", err, s)
			}
		}
	})
}
