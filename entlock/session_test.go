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
	"github.com/ormlock/ormlock/keyhash"
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

// txConnID returns the server connection id of ent's transaction tx:
// pg_backend_pid() or CONNECTION_ID().
func txConnID(ctx context.Context, k testdb.Kind, tx *ent.Tx) (int64, error) {
	query := "SELECT CONNECTION_ID()"
	if k.Dialect() == "postgres" {
		query = "SELECT pg_backend_pid()"
	}
	rows, err := tx.QueryContext(ctx, query)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var id int64
	if !rows.Next() {
		return 0, fmt.Errorf("%s: no row: %v", query, rows.Err())
	}
	if err := rows.Scan(&id); err != nil {
		return 0, err
	}
	return id, rows.Err()
}

// Holder takes the *entlock.Driver as well as a client: free, then held by
// a transaction's connection. What Holder reports is tested for every
// adapter in internal/conformance (TestHolderFree, TestHolderTransaction).
func TestHolderDriver(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		drv, client, _ := openDriver(t, k)
		for _, key := range []ormlock.Key{ormlock.Name("holder-free-" + t.Name()), ormlock.ID(keyhash.Int64("holder-free-id-" + t.Name())), ormlock.Pair(-3, 77)} {
			h, err := entlock.Holder(ctx, drv, key)
			if err != nil || h.Held || h.String() != "free" || h.Dialect != k.Dialect() || h.Lock == "" {
				t.Errorf("%v: free lock reported as %+v (%v)", key, h, err)
			}
		}
		key := "holder-tx-" + t.Name()
		var hd ormlock.HolderInfo
		var pid int64
		err := entlock.Transaction(ctx, client, key, func(tx *ent.Tx) error {
			var err error
			if pid, err = txConnID(ctx, k, tx); err != nil {
				return err
			}
			hd, err = entlock.Holder(ctx, drv, key)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if !hd.Held || hd.PID != pid {
			t.Fatalf("Holder on the driver = %+v, want held by the transaction's connection %d", hd, pid)
		}
		if h, err := entlock.Holder(ctx, drv, key); err != nil || h.Held {
			t.Fatalf("after Transaction: %v %v, want free", h, err)
		}
	})
}

func TestHolderBadInput(t *testing.T) {
	ctx := context.Background()
	var nilCtx context.Context
	client, _ := openEnt(t, testdb.Postgres)
	holderErr := func(_ ormlock.HolderInfo, err error) error { return err }
	for _, c := range []struct {
		name string
		err  error
		want error
		text string
	}{
		{"nil ctx", holderErr(entlock.Holder(nilCtx, client, "k")), ormlock.ErrInvalidArgument, "entlock.Holder: nil context"},
		{"nil client", holderErr(entlock.Holder(ctx, (*ent.Client)(nil), "k")), ormlock.ErrInvalidArgument, "entlock.Holder: nil client"},
	} {
		if !errors.Is(c.err, c.want) || !strings.Contains(c.err.Error(), c.text) || !strings.HasPrefix(c.err.Error(), "ormlock: ") {
			t.Errorf("%s: %v, want %v mentioning %q", c.name, c.err, c.want, c.text)
		}
	}
	// on a transactional client: refused, ent has no nested transactions
	err := entlock.Transaction(ctx, client, "holder-bad-"+t.Name(), func(tx *ent.Tx) error {
		_, err := entlock.Holder(ctx, tx.Client(), "k")
		if !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "within a transaction") {
			return fmt.Errorf("Holder on tx.Client(): %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
