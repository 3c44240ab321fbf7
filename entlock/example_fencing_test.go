package entlock_test

import (
	"context"
	"errors"
	"log"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/testdb/enttest/ent"
)

// fn reads its fencing token from the tx it is given (ent's Tx keeps no
// context fn could read it from), to fence the writes that outlive the
// lock: see ormlock.CheckFenced.
func ExampleFencingToken() {
	var client *ent.Client // built on entlock.Wrap; entlock.Migrate has created the fence table
	ctx := context.Background()
	err := entlock.Transaction(ctx, client, "rebalance", func(tx *ent.Tx) error {
		tok, ok := entlock.FencingToken(tx)
		if !ok {
			return errors.New("no token: call with ormlock.WithFencing()")
		}
		log.Printf("writing with fencing token %d", tok)
		return nil
	}, ormlock.WithFencing())
	if err != nil {
		log.Fatal(err)
	}
}
