package lockproto_test

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
)

// Each protocol of BeginLocked, on the real servers: xact in the caller's
// transaction (one message with pgx, or BEGIN then the lock for a
// *sql.Tx), the split protocol (REPEATABLE READ, SERIALIZABLE), and the
// MySQL/MariaDB named lock on the transaction's pinned connection.

type protocolCase struct {
	name      string
	opts      *sql.TxOptions
	needSQLTx bool
	want      string // the Tx type: "one message", "*sql.Tx"
}

func protocolCases(k testdb.Kind) []protocolCase {
	rr := &sql.TxOptions{Isolation: sql.LevelRepeatableRead}
	ser := &sql.TxOptions{Isolation: sql.LevelSerializable}
	if k.Dialect() == "mysql" {
		return []protocolCase{
			{"named", nil, false, "*sql.Tx"},
			{"named, repeatable read", rr, false, "*sql.Tx"},
			{"named, serializable", ser, false, "*sql.Tx"},
		}
	}
	return []protocolCase{
		{"xact, one message", nil, false, "one message"},
		{"xact, read committed, one message", &sql.TxOptions{Isolation: sql.LevelReadCommitted}, false, "one message"},
		{"xact, BEGIN then the lock", nil, true, "*sql.Tx"},
		{"split, repeatable read", rr, false, "*sql.Tx"},
		{"split, serializable", ser, false, "*sql.Tx"},
	}
}

// twoPoolsAndTable opens two pools of k, checked for leaks at the end, and
// creates the test's table (prefix), with one int column v.
func twoPoolsAndTable(t *testing.T, k testdb.Kind, prefix string) (db, other *sql.DB, table string) {
	t.Helper()
	db, other = testdb.Open(t, k), testdb.Open(t, k)
	t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db, other) })
	table = testdb.Table(t, k, prefix)
	if _, err := db.ExecContext(context.Background(), "CREATE TABLE "+table+" (v int)"); err != nil {
		t.Fatal(err)
	}
	return db, other, table
}

func newOp(t *testing.T, k testdb.Kind, key keys.Key, opts ...ormlock.Option) *lockproto.Op {
	t.Helper()
	d, err := lockproto.DialectOf(k.Dialect())
	if err != nil {
		t.Fatal(err)
	}
	op, err := lockproto.NewOp(d, "Transaction", key, config.New(opts...))
	if err != nil {
		t.Fatal(err)
	}
	return op
}

// The lock is held from BeginLocked to the transaction's end and no
// longer; Commit keeps fn's writes and Rollback undoes them; nothing leaks.
func TestBeginLockedProtocols(t *testing.T) {
	ctx := context.Background()
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, other, table := twoPoolsAndTable(t, k, "protocols")
		for i, c := range protocolCases(k) {
			t.Run(c.name, func(t *testing.T) {
				key := keys.Name(t.Name())
				begin := func() *lockproto.LockedTx {
					t.Helper()
					op := newOp(t, k, key)
					op.NeedSQLTx = c.needSQLTx
					lt, err := op.BeginLocked(ctx, db, c.opts)
					if err != nil {
						t.Fatal(err)
					}
					got := "*sql.Tx"
					if _, ok := lt.Tx.(*lockproto.OneMessageTx); ok {
						got = "one message"
					} else if _, ok := lt.Tx.(*sql.Tx); !ok {
						got = "other"
					}
					if got != c.want {
						t.Fatalf("Tx is %T, want %s", lt.Tx, c.want)
					}
					// held: another pool's try loses, at any level
					if lt2, err := newOp(t, k, key).BeginLocked(ctx, other, c.opts); !errors.Is(err, ormlock.ErrNotAcquired) {
						if err == nil {
							_ = lt2.Rollback()
						}
						t.Fatalf("second holder: %v, want ErrNotAcquired", err)
					}
					return lt
				}
				free := func() {
					t.Helper()
					lt, err := newOp(t, k, key).BeginLocked(ctx, other, c.opts)
					if err != nil {
						t.Fatalf("the lock is not free after the transaction ended: %v", err)
					}
					if err := lt.Rollback(); err != nil {
						t.Fatal(err)
					}
				}
				count := func(v int) int {
					t.Helper()
					var n int
					if err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+table+" WHERE v = "+strconv.Itoa(v)).Scan(&n); err != nil {
						t.Fatal(err)
					}
					return n
				}

				for j, end := range []struct {
					name string
					f    func(*lockproto.LockedTx) error
					rows int // fn's row after the end
				}{{"Rollback", (*lockproto.LockedTx).Rollback, 0}, {"Commit", (*lockproto.LockedTx).Commit, 1}} {
					v := 2*i + j
					lt := begin()
					if _, err := lt.Tx.ExecContext(ctx, "INSERT INTO "+table+" (v) VALUES ("+strconv.Itoa(v)+")"); err != nil {
						t.Fatal(err)
					}
					if err := end.f(lt); err != nil {
						t.Fatalf("%s: %v", end.name, err)
					}
					if n := count(v); n != end.rows {
						t.Fatalf("after %s: %d of fn's rows, want %d", end.name, n, end.rows)
					}
					free()
				}
			})
		}
	})
}

// A holder that waited for the lock sees, at every level, what the holder
// before it committed: its snapshot is taken after the lock is granted
// (the split protocol on PostgreSQL, the transaction begun after GET_LOCK
// on MySQL/MariaDB).
func TestBeginLockedSeesEarlierHolder(t *testing.T) {
	ctx := context.Background()
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, other, table := twoPoolsAndTable(t, k, "earlier")
		for i, c := range protocolCases(k) {
			t.Run(c.name, func(t *testing.T) {
				key := keys.Name(t.Name())
				first, err := newOp(t, k, key).BeginLocked(ctx, db, c.opts)
				if err != nil {
					t.Fatal(err)
				}
				type result struct {
					n   int
					err error
				}
				second := make(chan result, 1)
				waiter := newOp(t, k, key, ormlock.WithWait(time.Minute))
				waiter.NeedSQLTx = c.needSQLTx
				go func() {
					lt, err := waiter.BeginLocked(ctx, other, c.opts)
					if err != nil {
						second <- result{err: err}
						return
					}
					var n int
					err = lt.Tx.QueryRowContext(ctx, "SELECT count(*) FROM "+table+" WHERE v = "+strconv.Itoa(i+1)).Scan(&n)
					second <- result{n, errors.Join(err, lt.Commit())}
				}()
				waitForWaiter(t, k, key)
				if _, err := first.Tx.ExecContext(ctx, "INSERT INTO "+table+" (v) VALUES ("+strconv.Itoa(i+1)+")"); err != nil {
					t.Fatal(err)
				}
				if err := first.Commit(); err != nil {
					t.Fatal(err)
				}
				r := <-second
				if r.err != nil || r.n != 1 {
					t.Fatalf("the next holder saw %d rows of the earlier holder's commit (err %v), want 1", r.n, r.err)
				}
			})
		}
	})
}

// waitForWaiter returns once a session waits for key's lock on the server:
// on PostgreSQL an ungranted pg_locks row for the key, on MySQL/MariaDB a
// connection in the "User lock" state (GET_LOCK waiting).
func waitForWaiter(t *testing.T, k testdb.Kind, key keys.Key) {
	t.Helper()
	ctx := context.Background()
	admin := testdb.AdminDB(t, k)
	op := newOp(t, k, key)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if k.Dialect() == "postgres" {
			h, err := lockproto.LookupHolder(ctx, admin, op)
			if err != nil {
				t.Fatal(err)
			}
			n = h.Waiters
		} else if err := admin.QueryRowContext(ctx, "SELECT count(*) FROM information_schema.PROCESSLIST WHERE STATE = 'User lock'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no session waits for the lock")
		}
		time.Sleep(5 * time.Millisecond) // polling the server's state, not ordering
	}
}

// The split protocol confirms its lock transaction before fn's COMMIT: a
// lock transaction gone (its backend terminated) makes Commit roll fn's
// transaction back and report ErrLockLost.
func TestSplitCommitConfirmsLock(t *testing.T) {
	ctx := context.Background()
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			db, _, table := twoPoolsAndTable(t, k, "split_lost")
			op := newOp(t, k, keys.Name(t.Name()))
			lt, err := op.BeginLocked(ctx, db, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := lt.Tx.ExecContext(ctx, "INSERT INTO "+table+" (v) VALUES (1)"); err != nil {
				t.Fatal(err)
			}
			h, err := lockproto.LookupHolder(ctx, testdb.AdminDB(t, k), op)
			if err != nil || !h.Held {
				t.Fatalf("holder: %+v %v", h, err)
			}
			testdb.Kill(t, k, h.PID)
			testdb.WaitGone(t, k, h.PID)
			if err := lt.Commit(); !errors.Is(err, ormlock.ErrLockLost) {
				t.Fatalf("Commit: %v, want ErrLockLost", err)
			}
			var n int
			if err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil || n != 0 {
				t.Fatalf("fn's transaction committed without its lock: %d rows, %v", n, err)
			}
		})
	}
}

// The split protocol needs two connections: a pool of one is refused
// before anything is taken.
func TestSplitRefusesPoolOfOne(t *testing.T) {
	ctx := context.Background()
	k := testdb.Postgres
	db := testdb.Open(t, k)
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
	key := keys.Name(t.Name())
	if _, err := newOp(t, k, key).BeginLocked(ctx, db, &sql.TxOptions{Isolation: sql.LevelSerializable}); !errors.Is(err, ormlock.ErrInvalidArgument) {
		t.Fatalf("BeginLocked: %v, want ErrInvalidArgument", err)
	}
	if !testdb.RawFree(t, k, "", t.Name()) {
		t.Fatal("the refused call left the lock held")
	}
}

// A pool whose server default isolation takes its snapshot once, with no
// level asked for: the lock statement reads the level, gives the
// transaction back and takes the split protocol at that level, on the
// one-message path and on BEGIN-then-lock alike. Directly on PostgreSQL
// only: PgBouncer refuses the start-up parameter.
func TestBeginLockedServerDefaultIsolation(t *testing.T) {
	ctx := context.Background()
	k := testdb.Postgres
	db := openWithParam(t, k, "default_transaction_isolation=repeatable%20read")
	other := testdb.Open(t, k)
	t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db, other) })
	for _, needSQLTx := range []bool{false, true} {
		key := keys.Name(t.Name() + strconv.FormatBool(needSQLTx))
		op := newOp(t, k, key)
		op.NeedSQLTx = needSQLTx
		lt, err := op.BeginLocked(ctx, db, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := lt.Tx.(*sql.Tx); !ok {
			t.Errorf("Tx is %T, want the split protocol's *sql.Tx", lt.Tx)
		}
		var level string
		if err := lt.Tx.QueryRowContext(ctx, "SELECT current_setting('transaction_isolation')").Scan(&level); err != nil || level != "repeatable read" {
			t.Errorf("fn's transaction runs at %q (%v), want repeatable read", level, err)
		}
		if _, err := newOp(t, k, key).BeginLocked(ctx, other, nil); !errors.Is(err, ormlock.ErrNotAcquired) {
			t.Errorf("second holder: %v, want ErrNotAcquired", err)
		}
		if err := lt.Commit(); err != nil {
			t.Fatal(err)
		}
	}
}

// openWithParam opens a pgx pool on k whose connections start with the
// run-time parameter param ("name=value", URL-escaped), closed when the
// test ends. Directly on PostgreSQL: PgBouncer refuses such parameters.
func openWithParam(t *testing.T, k testdb.Kind, param string) *sql.DB {
	t.Helper()
	dsn := testdb.DSN(t, k)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	db, err := sql.Open("pgx", dsn+sep+param)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// The one-message BEGIN and lock writes keys as integer literals: the
// extremes of both key spaces must name the very lock the extended
// protocol's parameters name, try-once and waiting, and a loser leaves the
// connection idle outside any transaction, back in the pool.
func TestOneMessageKeys(t *testing.T) {
	ctx := context.Background()
	cases := []keys.Key{
		keys.ID(math.MinInt64), keys.ID(math.MaxInt64), keys.ID(-1), keys.ID(0),
		keys.Pair(math.MinInt32, math.MaxInt32), keys.Pair(-1, 0),
	}
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			db := testdb.Open(t, k)
			other := testdb.Open(t, k)
			t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db, other) })
			for _, key := range cases {
				for _, wait := range []time.Duration{0, 30 * time.Millisecond} {
					cfg := config.Config{Wait: wait}
					op, err := lockproto.NewOp(lockproto.Postgres, "Transaction", key, cfg)
					if err != nil {
						t.Fatal(err)
					}
					lt, err := op.BeginLocked(ctx, db, nil)
					if err != nil {
						t.Fatalf("%v wait %v: %v", key, wait, err)
					}
					if _, ok := lt.Tx.(*lockproto.OneMessageTx); !ok {
						t.Fatalf("Tx is %T, want the one-message *lockproto.OneMessageTx", lt.Tx)
					}
					// the hand-written, extended-protocol try on the same key loses
					tx, err := other.BeginTx(ctx, nil)
					if err != nil {
						t.Fatal(err)
					}
					if ok, err := lockproto.PGTryXact(ctx, tx, keys.Postgres(keys.Key(key), ""), nil, nil); err != nil || ok {
						t.Fatalf("%v: hand-written try while held: %v %v", key, ok, err)
					}
					_ = tx.Rollback()
					// and so does a second one-message call
					op2, _ := lockproto.NewOp(lockproto.Postgres, "Transaction", key, cfg)
					if _, err := op2.BeginLocked(ctx, other, nil); !errors.Is(err, ormlock.ErrNotAcquired) {
						t.Fatalf("%v wait %v: second holder: %v", key, wait, err)
					}
					if err := lt.Commit(); err != nil {
						t.Fatal(err)
					}
				}
			}
			if s := other.Stats(); s.InUse != 0 || s.OpenConnections == 0 {
				t.Fatalf("loser's connection not back in the pool: %+v", s)
			}
		})
	}
}

// OneMessageTx ends like a *sql.Tx: after Commit, statements fail with
// sql.ErrTxDone and a second Commit or Rollback too; a statement on an
// ended context fails without reaching the connection, which stays usable.
func TestOneMessageTxEnd(t *testing.T) {
	ctx := context.Background()
	db := testdb.Open(t, testdb.Postgres)
	t.Cleanup(func() { testdb.AssertNoLeaks(t, testdb.Postgres, db) })
	op, err := lockproto.NewOp(lockproto.Postgres, "Transaction", keys.Name(t.Name()), config.Config{})
	if err != nil {
		t.Fatal(err)
	}
	lt, err := op.BeginLocked(ctx, db, &sql.TxOptions{Isolation: sql.LevelReadCommitted, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var ro string
	if err := lt.Tx.QueryRowContext(ctx, "SHOW transaction_read_only").Scan(&ro); err != nil || ro != "on" {
		t.Fatalf("READ ONLY: %q %v", ro, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := lt.Tx.ExecContext(cctx, "SELECT 1"); !errors.Is(err, context.Canceled) {
		t.Fatalf("on a cancelled context: %v", err)
	}
	if err := lt.Tx.QueryRowContext(cctx, "SELECT 1").Scan(new(int)); !errors.Is(err, context.Canceled) {
		t.Fatalf("QueryRow on a cancelled context: %v", err)
	}
	if _, err := lt.Tx.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Fatalf("after the cancelled statements: %v", err)
	}
	if err := lt.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := lt.Tx.ExecContext(ctx, "SELECT 1"); !errors.Is(err, sql.ErrTxDone) {
		t.Fatalf("after Commit: %v", err)
	}
	if err := lt.Tx.Rollback(); !errors.Is(err, sql.ErrTxDone) {
		t.Fatalf("Rollback after Commit: %v", err)
	}
}
