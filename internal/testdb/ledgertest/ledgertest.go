// Package ledgertest fills a ledger table on the test servers of
// internal/testdb the way the library would, for the tests that read one
// back (the web view's, in webui and webui/uitest): rows written with admin
// SQL, a claim-mode run in progress and a fenced leader. It is a package of
// its own, like internal/testdb/gormtest, because it calls sqllock, and
// sqllock's own dependencies test themselves with internal/testdb.
package ledgertest

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/sqllock"
)

// InsertRun writes a ledger row of table as the library does (admin SQL, so
// that any value can be written): namespace ns, started at started and
// lasting d (d < 0: still running, no finished_at), errText as its error
// ("" for none).
func InsertRun(t testing.TB, k testdb.Kind, table, ns, job string, slot time.Time, status, owner string, started time.Time, d time.Duration, errText string) {
	t.Helper()
	admin := testdb.AdminDB(t, k)
	var fin, e any
	if d >= 0 {
		fin = started.Add(d)
	}
	if errText != "" {
		e = errText
	}
	var err error
	if k.Dialect() == "postgres" {
		_, err = admin.Exec(`INSERT INTO "`+table+`" (namespace, job, slot, status, owner, started_at, finished_at, error) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
			ns, job, slot, status, owner, started, fin, e)
	} else {
		f := func(v any) any {
			if tm, ok := v.(time.Time); ok {
				return tm.UTC().Format("2006-01-02 15:04:05.000000")
			}
			return v
		}
		_, err = admin.Exec("INSERT INTO `"+table+"` (namespace, job, slot, status, owner, started_at, finished_at, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
			ns, job, f(slot), status, owner, f(started), f(fin), e)
	}
	if err != nil {
		t.Fatalf("insert run: %v", err)
	}
}

// ClaimRunning runs a claim-mode sqllock.RunOnce of (job, slot) on db as
// owner, with table as its ledger, whose fn works until the test ends, and
// returns once fn runs: the slot's row is 'running' and its lock held.
func ClaimRunning(t testing.TB, db *sql.DB, table, job string, slot time.Time, owner string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	running, done := make(chan struct{}), make(chan error, 1)
	go func() {
		done <- sqllock.RunOnce(ctx, db, job, slot, func(ctx context.Context, _ *sql.Tx) error {
			close(running)
			<-ctx.Done()
			return nil
		}, ormlock.WithClaim(), ormlock.WithOwner(owner), ormlock.WithLedgerTable(table))
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case <-running:
	case err := <-done:
		t.Fatalf("RunOnce returned before fn ran: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("fn did not run within 30s")
	}
}

// Leading runs a fenced sqllock.Lead of key on db as owner, with table as
// its ledger, until the test ends, and returns once it is elected; a Lead
// that ends with an error other than its cancellation fails the test.
func Leading(t testing.TB, db *sql.DB, table string, key ormlock.Key, owner string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	elected, done := make(chan struct{}), make(chan error, 1)
	go func() {
		done <- sqllock.Lead(ctx, db, key, func(ctx context.Context) error {
			close(elected)
			<-ctx.Done()
			return ctx.Err()
		}, ormlock.WithFencing(), ormlock.WithOwner(owner), ormlock.WithLedgerTable(table))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Lead: %v", err)
		}
	})
	select {
	case <-elected:
	case err := <-done:
		t.Fatalf("Lead returned before it was elected: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("not elected within 30s")
	}
}
