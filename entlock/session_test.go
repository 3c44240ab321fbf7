package entlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest"
	"github.com/ormlock/ormlock/internal/testdb/enttest/ent"
	"github.com/ormlock/ormlock/internal/testdb/enttest/ent/item"
)

// Session takes the *entlock.Driver as well as the generated client; fn
// works through the normal pool of the same client. What Session does is
// tested for every adapter in internal/conformance (session_test.go).
func TestSessionOnClientAndDriver(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		drv, client, _ := openDriver(t, k)
		other, _ := openEnt(t, k)
		owner := enttest.Owner(t, k)
		key := "session-" + t.Name()
		for name, session := range map[string]func(fn func(context.Context) error) error{
			"client": func(fn func(context.Context) error) error { return entlock.Session(ctx, client, key, fn) },
			"driver": func(fn func(context.Context) error) error { return entlock.Session(ctx, drv, key, fn) },
		} {
			rec := 0
			err := session(func(ctx context.Context) error {
				rec++
				if rawFree(t, k, key) {
					return errors.New("raw SQL took the lock during the Session")
				}
				if err := entlock.Session(ctx, other, key, func(context.Context) error { return nil }); !errors.Is(err, ormlock.ErrNotAcquired) {
					return fmt.Errorf("Session during the Session: %v, want ErrNotAcquired", err)
				}
				return client.Item.Create().SetOwner(owner).SetN(rec).Exec(ctx)
			})
			if err != nil || rec != 1 {
				t.Fatalf("%s: err=%v calls=%d", name, err, rec)
			}
			if !rawFree(t, k, key) {
				t.Fatalf("%s: lock held after Session returned", name)
			}
		}
		if n := count(t, k, owner); n != 2 {
			t.Fatalf("rows = %d, want 2", n)
		}
	})
}

func TestSessionOnTransactionalClient(t *testing.T) {
	ctx := context.Background()
	client, _ := openEnt(t, testdb.Postgres)
	err := entlock.Transaction(ctx, client, "sess-tx-"+t.Name(), func(tx *ent.Tx) error {
		err := entlock.Session(ctx, tx.Client(), "sess-tx-inner", func(context.Context) error { return errors.New("fn called") })
		if !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "within a transaction") {
			return fmt.Errorf("Session on tx.Client(): %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestSessionItemsVisible(t *testing.T) {
	// fn's writes through the normal pool commit on their own: nothing is
	// held in a long transaction.
	ctx := context.Background()
	k := testdb.PgBouncer
	client, _ := openEnt(t, k)
	owner := enttest.Owner(t, k)
	err := entlock.Session(ctx, client, "sess-visible-"+t.Name(), func(ctx context.Context) error {
		if err := client.Item.Create().SetOwner(owner).Exec(ctx); err != nil {
			return err
		}
		if n := count(t, k, owner); n != 1 {
			return fmt.Errorf("row not visible to others while the Session runs: %d", n)
		}
		_, err := client.Item.Query().Where(item.Owner(owner)).Only(ctx)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
