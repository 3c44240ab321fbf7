package conformance_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// TestStandbyRefused: every verb on a pool whose server is a PostgreSQL hot
// standby (a dbresolver replica, a misrouted DSN) is refused before fn runs,
// with ErrUnsupportedDialect naming the reason; the primary still works.
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
			ctx := context.Background()
			r := open(t, a, standby)
			want := func(t *testing.T, what string, err error) {
				t.Helper()
				if !errors.Is(err, ormlock.ErrUnsupportedDialect) || !strings.Contains(err.Error(), "hot standby") {
					t.Errorf("%s on a standby: %v; want ErrUnsupportedDialect naming the hot standby", what, err)
				}
			}
			called := false
			want(t, "Transaction", r.Transaction(ctx, "standby-tx", func(txn) error { called = true; return nil }))
			want(t, "Session", r.Session(ctx, "standby-session", func(context.Context) error { called = true; return nil }))
			want(t, "RunOnce", r.RunOnce(ctx, "standby-job", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), func(txn) error { called = true; return nil }))
			_, err := r.Holder(ctx, "standby-tx")
			want(t, "Holder", err)
			// A refusal is not cached: the second call asks again and is refused again.
			want(t, "Transaction again", r.Transaction(ctx, "standby-tx", func(txn) error { called = true; return nil }))
			if called {
				t.Error("fn ran on a standby")
			}
			if err := open(t, a, primary).Transaction(ctx, "standby-tx", func(txn) error { return nil }); err != nil {
				t.Errorf("Transaction on the primary: %v", err)
			}
		})
	}
}
