package entlock_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	entsql "entgo.io/ent/dialect/sql"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/enttest/ent"
	"github.com/ormlock/ormlock/internal/testdb"
)

// TestStandbyRefused: on a pool whose server is a PostgreSQL hot standby,
// the verbs are refused before fn runs, with ErrUnsupportedDialect naming
// the reason.
func TestStandbyRefused(t *testing.T) {
	primary := testdb.Start(t, testdb.Postgres)
	standby := primary.StartStandby(t)
	db, err := sql.Open("pgx", standby.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	t.Cleanup(func() { standby.AssertNoLeaks(t, db) })
	client := ent.NewClient(ent.Driver(entlock.Wrap(entsql.OpenDB("postgres", db))))
	ctx := context.Background()

	want := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ormlock.ErrUnsupportedDialect) || !strings.Contains(err.Error(), "hot standby") {
			t.Errorf("%s on a standby: %v; want ErrUnsupportedDialect naming the hot standby", what, err)
		}
	}
	called := false
	want("Transaction", entlock.Transaction(ctx, client, "standby-tx", func(*ent.Tx) error { called = true; return nil }))
	want("Session", entlock.Session(ctx, client, "standby-session", func(context.Context) error { called = true; return nil }))
	_, err = entlock.Holder(ctx, client, "standby-tx")
	want("Holder", err)
	if called {
		t.Error("fn ran on a standby")
	}
}
