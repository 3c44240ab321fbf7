package gormlock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/keyhash"
)

// An observer that panics, on any event, of any verb, on any server, costs
// neither the lock nor its connection nor the process: the verb ends as it
// would have with a quiet observer, the lock is free afterwards, no
// connection is in use, and the panic is reported once on slog.Default. A
// panic on lock_lost, which runs on the Session's keepalive goroutine, would
// otherwise end the test binary.
func TestObserverPanicContained(t *testing.T) {
	testdb.ObserverPanicSuite(t, func(t *testing.T, k testdb.Kind) (*sql.DB, testdb.Provoke) {
		db, sqlDB := openGorm(t, k)
		tbl := ledgerTable(t, k, db)
		return sqlDB, func(t *testing.T, verb string, ev ormlock.EventKind, obs ormlock.Observer) error {
			return provokeGorm(t, k, db, verb, ev, obs, tbl)
		}
	})
}

// provokeGorm calls verb with obs so that event ev happens, and returns the
// verb's error; a release failure on a dedicated connection is a loss found
// at release, so its ErrLockLost is dropped here.
func provokeGorm(t *testing.T, k testdb.Kind, db *gorm.DB, verb string, ev ormlock.EventKind, obs ormlock.Observer, tbl string) error {
	t.Helper()
	name := "opanic-" + t.Name()
	job, slot := name, slotAt(int(ev))
	key := ormlock.Name(name)
	if strings.HasPrefix(verb, "RunOnce") {
		key = keys.RunKey(job, slot)
	}
	opts := []ormlock.Option{ormlock.WithObserver(obs), ormlock.WithLedgerTable(tbl)}
	switch ev {
	case ormlock.EventNotAcquired:
		defer rawHold(t, k, key.String())()
	case ormlock.EventLockLost:
		opts = append(opts, ormlock.WithKeepalive(100*time.Millisecond))
	case ormlock.EventReleaseFailed:
		opts = append(opts, ormlock.WithKeepalive(time.Hour))
	case ormlock.EventAlreadyDone:
		rest := append([]ormlock.Option{ormlock.WithLedgerTable(tbl)}, claimOpt(verb)...)
		if err := gormlock.RunOnce(db, job, slot, func(*gorm.DB) error { return nil }, rest...); err != nil {
			t.Fatalf("first run: %v", err)
		}
	}
	opts = append(opts, claimOpt(verb)...)

	// body is fn's work: nothing, or what makes the lock fail or get lost
	body := func(ctx context.Context, tx *gorm.DB) error {
		switch {
		case ev == ormlock.EventReleaseFailed && tx != nil && verb != "RunOnce claim":
			// the lock released behind ormlock's back: RELEASE_LOCK fails
			return tx.Exec("DO RELEASE_LOCK(?)", keyhash.MySQLName("", key.String())).Error
		case ev == ormlock.EventReleaseFailed, ev == ormlock.EventLockLost:
			h, err := gormlock.Holder(db, key)
			if err != nil || !h.Held {
				return fmt.Errorf("holder: %v %v", h, err)
			}
			testdb.Kill(t, k, h.PID)
			if ev == ormlock.EventReleaseFailed { // no keepalive check: the release finds it
				testdb.WaitGone(t, k, h.PID)
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(30 * time.Second):
				return errors.New("loss not seen within 30s")
			}
		}
		return nil
	}
	var err error
	switch verb {
	case "Transaction":
		err = gormlock.Transaction(db, key, func(tx *gorm.DB) error { return body(tx.Statement.Context, tx) }, opts...)
	case "Session":
		err = gormlock.Session(db, key, func(ctx context.Context) error { return body(ctx, nil) }, opts...)
	default:
		err = gormlock.RunOnce(db, job, slot, func(tx *gorm.DB) error { return body(tx.Statement.Context, tx) }, opts...)
	}
	if ev == ormlock.EventReleaseFailed && errors.Is(err, ormlock.ErrLockLost) {
		return nil
	}
	return err
}

func claimOpt(verb string) []ormlock.Option {
	if verb == "RunOnce claim" {
		return []ormlock.Option{ormlock.WithClaim()}
	}
	return nil
}
