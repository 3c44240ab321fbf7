package conformance_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// checkLost fails the test unless err wraps ErrLockLost and each of also,
// says "ormlock: " once, at its head, and fits on one line.
func checkLost(t *testing.T, what string, err error, also ...error) {
	t.Helper()
	if !errors.Is(err, ormlock.ErrLockLost) {
		t.Errorf("%s: err = %v, want ErrLockLost", what, err)
	}
	for _, e := range also {
		if !errors.Is(err, e) {
			t.Errorf("%s: err = %v, want it to match %v too", what, err, e)
		}
	}
	if err == nil {
		return
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "ormlock: ") || strings.Count(msg, "ormlock: ") != 1 || strings.ContainsAny(msg, "\n\r") {
		t.Errorf("%s: message %q should start with \"ormlock: \", say it once and be one line", what, msg)
	}
}

// TestLockLostErrors: whenever the lock's connection is gone before a call
// ends, its error wraps ErrLockLost (and fn's own error, when fn failed,
// and the context's when it ended) and says "ormlock: " once: a
// Transaction whose connection is terminated while fn runs, a Session whose
// keepalive finds the loss, and one whose release finds it.
func TestLockLostErrors(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := openRunner(t, a, k)
		ctx := context.Background()
		key := "lost-errors-" + a.name + "-" + string(k)
		killOwn := func(tx txn) {
			if err := killConn(t, k, tx); err != nil {
				t.Fatalf("read the connection id: %v", err)
			}
		}

		// fn's statement fails on the terminated connection: fn's error
		// stays reachable
		var fnErr error
		err := r.Transaction(ctx, key, func(tx txn) error {
			killOwn(tx)
			fnErr = tx.Exec("SELECT 1")
			if fnErr == nil {
				t.Error("a statement on a terminated connection succeeded")
				fnErr = errors.New("no error")
			}
			return fnErr
		})
		checkLost(t, "Transaction, fn failed", err, fnErr)

		// fn returns nil: the COMMIT finds the connection gone
		err = r.Transaction(ctx, key, func(tx txn) error {
			killOwn(tx)
			return nil
		})
		checkLost(t, "Transaction, fn returned nil", err)

		// the keepalive finds the loss
		err = r.Session(ctx, key, func(fctx context.Context) error {
			h := holderOf(t, r, key)
			testdb.Kill(t, k, h.PID)
			return awaitLoss(fctx)
		}, ormlock.WithKeepalive(250*time.Millisecond)) // not shorter: a loss under load before the kill would leave no holder to kill
		checkLost(t, "Session, keepalive", err, context.Canceled)

		// the release finds it
		err = r.Session(ctx, key, func(fctx context.Context) error {
			return killHolder(fctx, t, k, r, key)
		}, ormlock.WithKeepalive(time.Minute))
		checkLost(t, "Session, release", err)
	})
}

// TestLockLostContextEndedInFn: on MySQL/MariaDB the driver closes a
// connection whose statement's context ends, which frees the named lock
// while fn still runs; the call's error must then wrap both ErrLockLost and
// the context's error, whichever statement (ROLLBACK, RELEASE_LOCK) finds
// the connection gone.
func TestLockLostContextEndedInFn(t *testing.T) {
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			k := testdb.MariaDB
			r := openRunner(t, a, k)
			key := "lost-ctx-" + a.name
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			err := r.Transaction(ctx, key, func(tx txn) error {
				id, err := queryInt(tx, connIDQuery(k))
				if err != nil {
					return err
				}
				go func() {
					// cancel once the statement below is running
					admin := testdb.AdminDB(t, k)
					for range 500 {
						var n int
						if admin.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ? AND INFO LIKE 'SELECT SLEEP%'", id).Scan(&n) == nil && n > 0 {
							break
						}
						time.Sleep(10 * time.Millisecond)
					}
					cancel()
				}()
				return tx.Exec("SELECT SLEEP(2)")
			})
			// (the server's thread may hold the lock until its SLEEP
			// ends: the leak check at the end of the test waits for it)
			checkLost(t, "Transaction, context ended in fn", err, context.Canceled)
		})
	}
}

// An error that passed through several layers (the lock protocol, the
// ledger, the adapter) still says "ormlock: " once, at its head, and fits
// on one line.
func TestErrorsSayOrmlockOnce(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := a.with(t, k)
		ctx := context.Background()
		check := func(what string, err error, sentinel error) {
			t.Helper()
			if !errors.Is(err, sentinel) {
				t.Fatalf("%s: %v, want %v", what, err, sentinel)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "ormlock: ") || strings.Count(msg, "ormlock: ") != 1 || strings.ContainsAny(msg, "\n\r") {
				t.Errorf("%s: message %q should start with \"ormlock: \", say it once and be one line", what, msg)
			}
		}

		key := "errtext-" + a.name + "-" + string(k)
		release := testdb.RawHold(t, k, "", key)
		err := r.Transaction(ctx, key, func(txn) error { return nil })
		check("Transaction on a held key", err, ormlock.ErrNotAcquired)
		err = r.Transaction(ctx, key, func(txn) error { return nil }, ormlock.WithWait(50*time.Millisecond))
		check("Transaction waiting for a held key", err, ormlock.ErrNotAcquired)
		release()

		missing := testdb.TableName(t, "missing")
		err = r.RunOnce(ctx, "errtext", time.Now().UTC().Truncate(time.Second), func(txn) error { return nil }, ormlock.WithLedgerTable(missing))
		if err == nil {
			t.Fatal("RunOnce with a missing ledger table: nil error")
		}
		if msg := err.Error(); strings.Count(msg, "ormlock: ") != 1 || !strings.Contains(msg, missing) {
			t.Errorf("RunOnce with a missing ledger table: %q should say \"ormlock: \" once and name the table", msg)
		}

		err = r.Transaction(ctx, "", func(txn) error { return nil })
		check("Transaction with an empty key", err, ormlock.ErrInvalidKey)
	})
}
