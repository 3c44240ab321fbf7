package entlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/enttest/ent"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/keyhash"
)

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

func TestHolderFree(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		drv, client, _ := openDriver(t, k)
		for _, key := range []ormlock.Key{ormlock.Name("holder-free-" + t.Name()), ormlock.ID(keyhash.Int64("holder-free-id-" + t.Name())), ormlock.Pair(-3, 77)} {
			for name, h := range map[string]func() (ormlock.HolderInfo, error){
				"client": func() (ormlock.HolderInfo, error) { return entlock.Holder(ctx, client, key) },
				"driver": func() (ormlock.HolderInfo, error) { return entlock.Holder(ctx, drv, key) },
			} {
				h, err := h()
				if err != nil {
					t.Fatalf("%s: Holder(%v): %v", name, key, err)
				}
				if h.Held || h.PID != 0 || h.User != "" || h.Waiters != 0 || !h.TxStart.IsZero() || h.String() != "free" || h.Dialect != k.Dialect() || h.Lock == "" {
					t.Errorf("%s: %v: free lock reported as %+v", name, key, h)
				}
			}
		}
	})
}

func TestHolderTransaction(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		drv, client, _ := openDriver(t, k)
		key := "holder-tx-" + t.Name()
		var h, hd ormlock.HolderInfo
		var pid int64
		err := entlock.Transaction(ctx, client, key, func(tx *ent.Tx) error {
			var err error
			if pid, err = txConnID(ctx, k, tx); err != nil {
				return err
			}
			time.Sleep(10 * time.Millisecond)
			if h, err = entlock.Holder(ctx, client, key); err != nil { // through the pool, another connection
				return err
			}
			hd, err = entlock.Holder(ctx, drv, key)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("holder seen from another connection: %s (lock %s)", h, h.Lock)
		if !h.Held || h.PID != pid || !hd.Held || hd.PID != pid {
			t.Fatalf("Holder = %+v (on the driver %+v), want held by the transaction's connection %d", h, hd, pid)
		}
		if h.User == "" || h.ClientAddr == "" || h.Database == "" || h.State == "" {
			t.Errorf("holder details missing: %+v", h)
		}
		if k.Dialect() == "postgres" {
			if h.State != "idle in transaction" || h.TxStart.IsZero() || h.Mode != "ExclusiveLock" || h.HeldFor <= 0 {
				t.Errorf("postgres details: %+v", h)
			}
			if !strings.Contains(h.Query, "pg_backend_pid") {
				t.Errorf("query = %q, want the holder's last statement", h.Query)
			}
			want := keyhash.Int64(key)
			if wantLock := fmt.Sprintf("classid=%d objid=%d objsubid=1", uint32(uint64(want)>>32), uint32(want)); h.Lock != wantLock {
				t.Errorf("Lock = %q, want %q", h.Lock, wantLock)
			}
		} else if h.State != "Sleep" || h.Lock != keyhash.MySQLName("", key) {
			t.Errorf("mariadb details: %+v", h)
		}
		if h, err := entlock.Holder(ctx, client, key); err != nil || h.Held {
			t.Fatalf("after Transaction: %v %v, want free", h, err)
		}
	})
}

// The reported holder of a Session is its lock connection: ending it makes
// the Session lose its lock.
func TestHolderSession(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		client, _ := openEnt(t, k)
		key := "holder-sess-" + t.Name()
		err := entlock.Session(context.Background(), client, key, func(ctx context.Context) error {
			h, err := entlock.Holder(ctx, client, key)
			if err != nil {
				return err
			}
			t.Logf("Session's lock connection: %s", h)
			if !h.Held || h.PID == 0 {
				return fmt.Errorf("holder %+v", h)
			}
			want := "Sleep"
			if k.Dialect() == "postgres" {
				want = "idle in transaction"
			}
			// the keepalive runs on that connection every 100ms: between
			// its checks the connection is idle
			for i := 0; h.State != want && i < 50; i++ {
				time.Sleep(20 * time.Millisecond)
				if h, err = entlock.Holder(ctx, client, key); err != nil {
					return err
				}
			}
			if h.State != want {
				return fmt.Errorf("state %q, want %q", h.State, want)
			}
			// the session's lock connection is not fn's: a statement of fn
			// runs on another one
			var own int64
			err = entlock.Transaction(ctx, client, key+"-other", func(tx *ent.Tx) error {
				own, err = txConnID(ctx, k, tx)
				return err
			})
			if err != nil || own == h.PID {
				return fmt.Errorf("fn's connection %d vs holder %d: %v", own, h.PID, err)
			}
			testdb.Kill(t, k, h.PID)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(30 * time.Second):
				return errors.New("loss not seen within 30s")
			}
		}, ormlock.WithKeepalive(100*time.Millisecond))
		if !errors.Is(err, ormlock.ErrLockLost) {
			t.Fatalf("err = %v, want ErrLockLost after ending the reported holder", err)
		}
	})
}

func TestHolderNamespace(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		client, _ := openEnt(t, k, ormlock.WithNamespace("holderns"))
		key := "holder-ns-" + t.Name()
		err := entlock.Transaction(ctx, client, key, func(tx *ent.Tx) error {
			pid, err := txConnID(ctx, k, tx)
			if err != nil {
				return err
			}
			if h, err := entlock.Holder(ctx, client, key); err != nil || !h.Held || h.PID != pid {
				return fmt.Errorf("with Wrap's namespace: %v %v, want pid %d", h, err, pid)
			}
			if h, err := entlock.Holder(ctx, client, key, ormlock.WithNamespace("holderns")); err != nil || !h.Held || h.PID != pid {
				return fmt.Errorf("with the namespace per call: %v %v", h, err)
			}
			if h, err := entlock.Holder(ctx, client, key, ormlock.WithNamespace("")); err != nil || h.Held {
				return fmt.Errorf("without the namespace, another key, yet held: %v %v", h, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
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
		{"empty key", holderErr(entlock.Holder(ctx, client, "")), ormlock.ErrInvalidKey, "empty"},
		{"zero Key", holderErr(entlock.Holder(ctx, client, ormlock.Key{})), ormlock.ErrInvalidKey, "zero Key"},
		{"bad namespace", holderErr(entlock.Holder(ctx, client, "k", ormlock.WithNamespace("a:b"))), ormlock.ErrInvalidKey, "namespace"},
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
