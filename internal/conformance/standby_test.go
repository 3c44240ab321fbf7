package conformance_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// TestStandbyRefused: every verb of every adapter (Transaction, Session,
// Lead, RunOnce in both modes, RunScheduled in both modes, Runs, Prune,
// Migrate, Holder) on a pool whose server is a PostgreSQL hot standby (a
// dbresolver replica, a misrouted DSN) is refused before fn runs, with
// ErrUnsupportedDialect naming the reason; a refusal is not cached (the
// next call asks again and is refused again); the primary still works.
func TestStandbyRefused(t *testing.T) {
	primary := testdb.Start(t, testdb.Postgres)
	standby := primary.StartStandby(t)
	open := func(t *testing.T, a adapter, s *testdb.Server) runner {
		db, err := sql.Open("pgx", s.DSN())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		t.Cleanup(func() { s.AssertNoLeaks(t, db) })
		return a.on(t, "postgres", db)
	}
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			r := open(t, a, standby)
			tbl := testdb.TableName(t, "standby")
			if err := open(t, a, primary).Migrate(context.Background(), ormlock.WithLedgerTable(tbl)); err != nil {
				t.Fatalf("Migrate on the primary: %v", err)
			}
			for _, v := range sweepVerbs(t, tbl) {
				t.Run(v.name, func(t *testing.T) {
					for _, what := range []string{"first call", "again"} {
						var ran atomic.Bool
						ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
						err := v.call(ctx, r, &ran)
						cancel()
						if !errors.Is(err, ormlock.ErrUnsupportedDialect) || !strings.Contains(err.Error(), "hot standby") {
							t.Errorf("%s on a standby: %v; want ErrUnsupportedDialect naming the hot standby", what, err)
						}
						if ran.Load() {
							t.Errorf("%s on a standby: fn ran", what)
						}
					}
				})
			}
			if err := open(t, a, primary).Transaction(context.Background(), "standby-tx", func(txn) error { return nil }); err != nil {
				t.Errorf("Transaction on the primary: %v", err)
			}
		})
	}
}
