package gormlock_test

import (
	"context"
	"errors"
	"log"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
)

// A long job writes through the pool while a Session holds its lock. If the
// process pauses past the loss of its lock and another replica takes over,
// the token refuses the late write: the row's fence column already holds
// the newer holder's greater token.
func ExampleFencingToken() {
	var db *gorm.DB // opened elsewhere; gormlock.Migrate has created the fence table
	err := gormlock.Session(db, "rebalance", func(ctx context.Context) error {
		tok, _ := ormlock.FencingToken(ctx)
		return gormlock.CheckFenced(db.WithContext(ctx).Exec(
			"UPDATE accounts SET balance = balance + 100, fence = ? WHERE id = ? AND fence <= ?", tok, 7, tok))
	}, ormlock.WithFencing())
	if errors.Is(err, ormlock.ErrStaleToken) {
		log.Print("a newer holder has written: this one's lock was lost")
	}
}

// In a Transaction the token comes with the tx, for a store outside the
// database that keeps the greatest token it has seen.
func ExampleFencingToken_transaction() {
	var db *gorm.DB // opened elsewhere
	_ = gormlock.Transaction(db, "publish-catalog", func(tx *gorm.DB) error {
		tok, _ := gormlock.FencingToken(tx)
		return publish(tx.Statement.Context, "catalog.json", tok)
	}, ormlock.WithFencing())
}

// publish stands for an external store's conditional write: it refuses a
// token smaller than the greatest it has seen.
func publish(ctx context.Context, object string, token int64) error { return nil }
