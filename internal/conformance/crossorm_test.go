package conformance_test

// Cross-ORM interop: gormlock, entlock and hand-written SQL contend for the
// same keys and must exclude each other.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest"
	"github.com/ormlock/ormlock/keyhash"
)

// rawLocker is hand-written SQL, as existing code would lock (try once, no
// options).

type rawLocker struct {
	k  testdb.Kind
	db *sql.DB
}

type rawTx struct {
	ctx context.Context
	tx  *sql.Tx
	k   testdb.Kind
}

func (r rawTx) Insert(owner string, n int) error {
	q := "INSERT INTO items (owner, n) VALUES (?, ?)"
	if r.k.Dialect() == "postgres" {
		q = "INSERT INTO items (owner, n) VALUES ($1, $2)"
	}
	_, err := r.tx.ExecContext(r.ctx, q, owner, n)
	return err
}

func openRaw(t *testing.T, k testdb.Kind) locker {
	t.Helper()
	db := testdb.Open(t, k)
	enttest.Migrate(t, k)
	t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
	return rawLocker{k, db}
}

var errRawNotAcquired = fmt.Errorf("raw: %w", ormlock.ErrNotAcquired)

func (r rawLocker) Transaction(ctx context.Context, k any, fn func(txn) error, opts ...ormlock.Option) (err error) {
	key, ok := k.(string)
	if len(opts) > 0 || !ok {
		return errors.New("raw locker takes a name and no options")
	}
	var conn *sql.Conn
	var tx *sql.Tx
	if r.k.Dialect() == "postgres" {
		if tx, err = r.db.BeginTx(ctx, nil); err != nil {
			return err
		}
		var ok bool
		if err := tx.QueryRowContext(ctx, "SELECT pg_try_advisory_xact_lock($1)", keyhash.Int64(key)).Scan(&ok); err != nil || !ok {
			_ = tx.Rollback()
			if err != nil {
				return err
			}
			return errRawNotAcquired
		}
	} else {
		if conn, err = r.db.Conn(ctx); err != nil {
			return err
		}
		name := keyhash.MySQLName("", key)
		var ok bool
		if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0) = 1", name).Scan(&ok); err != nil || !ok {
			conn.Close()
			if err != nil {
				return err
			}
			return errRawNotAcquired
		}
		defer func() {
			if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), "SELECT RELEASE_LOCK(?)", name); rerr != nil {
				err = errors.Join(err, rerr)
			}
			conn.Close()
		}()
		if tx, err = conn.BeginTx(ctx, nil); err != nil {
			return err
		}
	}
	if err := fn(rawTx{ctx, tx, r.k}); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

func (r rawLocker) Session(context.Context, any, func(context.Context) error, ...ormlock.Option) error {
	return errors.New("raw locker has no Session")
}

// Three instances, one per way of locking (gormlock, entlock, raw SQL),
// contend for one key: at most one holder at any instant.
func TestCrossORMMutualExclusion(t *testing.T) {
	for _, k := range testdb.Kinds() {
		t.Run(string(k), func(t *testing.T) {
			lockers := []locker{openGorm(t, k), openEnt(t, k), openRaw(t, k)}
			exclusion(t, k, enttest.Owner(t, k), "cross-mutex-"+t.Name(), lockers, 100)
		})
	}
}

// A holder of each kind excludes the other two, for each verb and for names
// that need quoting or are not ASCII.
func TestCrossORMInterop(t *testing.T) {
	for _, k := range testdb.Kinds() {
		t.Run(string(k), func(t *testing.T) {
			ctx := context.Background()
			all := map[string]locker{"gormlock": openGorm(t, k), "entlock": openEnt(t, k), "raw": openRaw(t, k)}
			for _, key := range []string{"interop-" + t.Name(), `it's "quoted"; --`, `it's "quoted"; DROP TABLE x; --`, "Zürich-日本-🔒"} {
				for hname, h := range all {
					err := h.Transaction(ctx, key, func(txn) error {
						for oname, o := range all {
							if oname == hname {
								continue
							}
							if err := o.Transaction(ctx, key, func(txn) error { return errors.New("fn called") }); !errors.Is(err, ormlock.ErrNotAcquired) {
								return fmt.Errorf("%s holder did not exclude %s: %v", hname, oname, err)
							}
						}
						return nil
					})
					if err != nil {
						t.Fatalf("%q: %v", key, err)
					}
					if !free(t, k, key) {
						t.Fatalf("%q: lock held after the %s holder returned", key, hname)
					}
				}
				// Sessions exclude the other adapter's Transaction too
				for hname, oname := range map[string]string{"gormlock": "entlock", "entlock": "gormlock"} {
					err := all[hname].Session(ctx, key, func(ctx context.Context) error {
						return all[oname].Transaction(ctx, key, func(txn) error { return errors.New("fn called") })
					})
					if !errors.Is(err, ormlock.ErrNotAcquired) {
						t.Fatalf("%q: %s Session did not exclude %s: %v", key, hname, oname, err)
					}
				}
			}
		})
	}
}

// The adapters agree on namespaced keys: the same namespace excludes, none
// does not.
func TestCrossORMNamespace(t *testing.T) {
	for _, k := range testdb.Kinds() {
		t.Run(string(k), func(t *testing.T) {
			ctx := context.Background()
			g, e := openGorm(t, k), openEnt(t, k)
			key := "ns-" + t.Name()
			ns := ormlock.WithNamespace("billing")
			err := g.Transaction(ctx, key, func(txn) error {
				if err := e.Transaction(ctx, key, func(txn) error { return errors.New("fn called") }, ns); !errors.Is(err, ormlock.ErrNotAcquired) {
					return fmt.Errorf("same namespace not excluded: %v", err)
				}
				return e.Transaction(ctx, key, func(txn) error { return nil })
			}, ns)
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
