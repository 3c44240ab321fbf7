package conformance_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// The server check (are this server's locks real?) is made once per pool
// for a server that passes it: every verb of every adapter, called on one
// pool, asks it once between them all, Lead's terms included (pgxlock's
// Lead used to ask at every call). A refusal is asked again: see
// TestStandbyRefused.
func TestServerCheckOncePerPool(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		tbl := testdb.Table(t, k, "chk")
		r, checks := checkCountedRunner(t, a, k)
		for range 2 {
			for _, v := range sweepVerbs(t, tbl) {
				var ran atomic.Bool
				// the second round finds the slots done
				if err := v.call(context.Background(), r, &ran); err != nil && !errors.Is(err, ormlock.ErrAlreadyDone) {
					t.Fatalf("%s: %v", v.name, err)
				}
			}
		}
		if n := checks(); n != 1 {
			t.Fatalf("the server was asked %d times whether its locks are real, want once per pool", n)
		}
	})
}

// checkCountedRunner opens adapter a on a new pool to the shared server of
// kind k and returns it with a count of the server checks sent through it:
// on PostgreSQL, the queries of pg_is_in_recovery() its connections sent
// (a pgx tracer); on MariaDB, the SHOW VARIABLES statements the server ran
// since (no other test runs meanwhile: the suite's top-level tests run one
// at a time, and only this kind's case sends them).
func checkCountedRunner(t *testing.T, a adapter, k testdb.Kind) (runner, func() int64) {
	t.Helper()
	dsn := testdb.DSN(t, k)
	if k.Dialect() != "postgres" {
		if a.name == "pgxlock" {
			t.Skip("pgxlock is PostgreSQL only")
		}
		admin := testdb.AdminDB(t, k)
		showVars := func() int64 {
			var name string
			var n int64
			if err := admin.QueryRow("SHOW GLOBAL STATUS LIKE 'Com_show_variables'").Scan(&name, &n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		db := testdb.Open(t, k)
		t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
		r := a.on(t, k.Dialect(), db)
		before := showVars()
		return r, func() int64 { return showVars() - before }
	}
	tr := &checkTracer{}
	if a.name == "pgxlock" {
		ps := newPgxPools(t, dsn)
		ps.tracer = tr
		t.Cleanup(func() { testdb.AssertNoLeaks(t, k, ps.db) })
		return pgxLocker{pools: ps}, tr.n.Load
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Tracer = tr
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { db.Close() })
	t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
	return a.on(t, k.Dialect(), db), tr.n.Load
}

// checkTracer counts the server checks its connections send.
type checkTracer struct{ n atomic.Int64 }

func (c *checkTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.Contains(data.SQL, "pg_is_in_recovery") {
		c.n.Add(1)
	}
	return ctx
}

func (c *checkTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestStandbyRefused: every verb of every adapter (Transaction, Session,
// Lead, RunOnce in both modes, RunScheduled in both modes, Runs, Prune,
// Migrate, Holder, AdvanceFences) on a pool whose server is a PostgreSQL hot standby (a
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
