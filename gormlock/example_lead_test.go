package gormlock_test

import (
	"context"
	"log"
	"os"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
)

// One replica of many consumes the queue: each calls Lead, one is elected
// and consumes until it is deposed (its ctx ends with cause
// ormlock.ErrLockLost), when another takes over; a deposed replica
// campaigns again. Lead returns when ctx ends (the service shuts down).
func ExampleLead() {
	var db *gorm.DB // opened elsewhere
	ctx := context.Background()
	host, _ := os.Hostname()
	err := gormlock.Lead(db.WithContext(ctx), "orders-consumer", func(ctx context.Context) error {
		term, _ := ormlock.FencingToken(ctx) // greater every term: fence the writes with it
		for ctx.Err() == nil {
			if err := db.WithContext(ctx).Exec("SELECT consume_batch(?)", term).Error; err != nil {
				return err // resign with the error: Lead returns it
			}
		}
		return ctx.Err()
	}, ormlock.WithOwner(host), ormlock.WithFencing())
	if err != nil {
		log.Print(err)
	}
}

// Sessions and Leads of one process share a few lock connections: one
// replica holds a thousand partitions on four server connections.
func ExampleLead_sharedLockConns() {
	var db *gorm.DB // opened elsewhere
	ctx := context.Background()
	for p := range 1000 {
		go func() {
			_ = gormlock.Lead(db.WithContext(ctx), ormlock.Pair(7, int32(p)), func(ctx context.Context) error {
				<-ctx.Done() // own partition p until deposed or shut down
				return ctx.Err()
			}, ormlock.WithSharedLockConns(4))
		}()
	}
}
