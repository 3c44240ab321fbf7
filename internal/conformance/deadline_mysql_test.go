package conformance_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/faults"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/keyhash"
)

// MariaDB freezes (SIGSTOP of the whole server) after fn's last statement,
// so the COMMIT (fn returned nil) or the ROLLBACK (fn failed) meets a
// server that does not answer: the call still returns by its deadline plus
// grace, with an error matching the context's (a COMMIT's outcome is
// unknown) or fn's own error, and once the server resumes the lock is free
// and nothing leaked. A private server, since freezing it stops every
// connection.
func TestDeadlineFrozenCommitMySQL(t *testing.T) {
	srv := testdb.Start(t, testdb.MariaDB)
	errFn := errors.New("fn failed")
	for _, c := range []struct {
		name  string
		fnErr error
	}{{"commit", nil}, {"rollback", errFn}} {
		for _, a := range adapters {
			t.Run(c.name+"/"+a.name, func(t *testing.T) {
				db, err := sql.Open("mysql", srv.DSN())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { srv.AssertNoLeaks(t, db); _ = db.Close() })
				r := a.on(t, "mysql", db)
				key := "frozen-commit-" + t.Name()
				const deadline = 2 * time.Second
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				defer cancel()
				var resume func()
				var thaw *time.Timer
				start := time.Now()
				err = r.Transaction(ctx, key, func(tx txn) error {
					if _, err := tx.QueryInt("SELECT 1"); err != nil {
						return err
					}
					resume = faults.Freeze(t, srv.PID())
					// should COMMIT or ROLLBACK not be bounded, the server thaws in
					// time for the call to return and the test to fail, not hang
					thaw = time.AfterFunc(deadline+grace+5*time.Second, resume)
					// SIGSTOP takes effect as each server thread next runs:
					// let it, or a COMMIT sent at once may still be answered
					time.Sleep(100 * time.Millisecond)
					return c.fnErr
				})
				faults.Within(t, "Transaction", start, deadline+grace)
				if thaw != nil {
					thaw.Stop()
				}
				if resume != nil {
					resume()
				}
				switch {
				case c.fnErr != nil && !errors.Is(err, errFn):
					t.Fatalf("Transaction: %v, want fn's error", err)
				case c.fnErr == nil && (!errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ormlock.ErrNotAcquired)):
					t.Fatalf("Transaction: %v, want DeadlineExceeded after the lock was taken", err)
				}
				admin, err := sql.Open("mysql", srv.DSN())
				if err != nil {
					t.Fatal(err)
				}
				defer admin.Close()
				var free sql.NullInt64
				deadlineFree := time.Now().Add(10 * time.Second)
				for {
					if err := admin.QueryRow("SELECT IS_FREE_LOCK(?)", keyhash.MySQLName("", key)).Scan(&free); err != nil {
						t.Fatal(err)
					}
					if free.Int64 == 1 || time.Now().After(deadlineFree) {
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
				if free.Int64 != 1 {
					t.Fatalf("the lock is still held after the server resumed")
				}
			})
		}
	}
}
