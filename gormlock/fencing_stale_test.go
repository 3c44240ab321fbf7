package gormlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/gormtest"
	"github.com/ormlock/ormlock/internal/testdb"
)

// TestFencingStaleWrite is the failure fencing exists for, end to end: a
// Session holder pauses (it ignores its context, as a process stopped by a
// GC pause or a frozen VM would), its lock connection dies, a second replica
// takes the lock and writes with its token, and the paused holder wakes and
// writes with its older token: the write is refused (ErrStaleToken) and the
// second replica's value stays.
func TestFencingStaleWrite(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		dbA, _ := gormtest.Open(t, k)
		dbB, _ := gormtest.Open(t, k)
		tbl := fenceLedger(t, k, dbA)
		res := table(t, k, dbA)
		if err := dbA.Exec("ALTER TABLE " + res + " ADD COLUMN fence BIGINT NOT NULL DEFAULT 0").Error; err != nil {
			t.Fatal(err)
		}
		if err := dbA.Exec("INSERT INTO " + res + " (id, note) VALUES (1, 'initial')").Error; err != nil {
			t.Fatal(err)
		}
		write := func(db *gorm.DB, note string, tok int64) error {
			return gormlock.CheckFenced(db.Exec("UPDATE "+res+" SET note = ?, fence = ? WHERE id = 1 AND fence <= ?", note, tok, tok))
		}
		key := "fence-stale-" + string(k)
		started, wake := make(chan int64, 1), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- gormlock.Session(dbA, key, func(ctx context.Context) error {
				tok, _ := ormlock.FencingToken(ctx)
				started <- tok
				<-wake // paused: does not watch ctx
				return write(dbA.WithContext(context.Background()), "A", tok)
			}, tbl, ormlock.WithFencing(), ormlock.WithKeepalive(200*time.Millisecond))
		}()
		tokA := <-started
		admin := testdb.AdminDB(t, k)
		testdb.KillOn(t, k.Dialect(), admin, lockConn(t, k.Dialect(), admin, key).id)

		var tokB int64
		err := gormlock.Transaction(dbB, key, func(tx *gorm.DB) error {
			tokB, _ = gormlock.FencingToken(tx)
			return write(tx, "B", tokB)
		}, tbl, ormlock.WithFencing(), ormlock.WithWait(10*time.Second))
		if err != nil {
			t.Fatalf("second holder: %v", err)
		}
		if tokB <= tokA {
			t.Fatalf("second holder's token %d <= first's %d", tokB, tokA)
		}
		close(wake)
		err = <-done
		if !errors.Is(err, ormlock.ErrStaleToken) || !errors.Is(err, ormlock.ErrLockLost) {
			t.Fatalf("paused holder's Session: %v; want ErrStaleToken and ErrLockLost", err)
		}
		var note string
		if err := dbA.Raw("SELECT note FROM " + res + " WHERE id = 1").Scan(&note).Error; err != nil {
			t.Fatal(err)
		}
		if note != "B" {
			t.Fatalf("row note %q, want B", note)
		}
	})
}
