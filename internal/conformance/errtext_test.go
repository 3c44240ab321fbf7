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
