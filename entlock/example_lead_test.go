package entlock_test

import (
	"context"
	"log"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/testdb/enttest/ent"
)

// One replica of many runs the reconciler: Lead campaigns, runs fn while
// elected, and campaigns again after a loss, until ctx ends.
func ExampleLead() {
	var client *ent.Client // built on entlock.Wrap
	ctx := context.Background()
	err := entlock.Lead(ctx, client, "reconciler", func(ctx context.Context) error {
		for ctx.Err() == nil {
			if err := client.Item.Create().SetOwner("reconciler").SetN(1).Exec(ctx); err != nil {
				return err
			}
		}
		return ctx.Err()
	}, ormlock.WithOwner("replica-a"))
	if err != nil {
		log.Print(err)
	}
}
