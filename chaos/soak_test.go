package chaos_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/faults"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest"
	"github.com/ormlock/ormlock/internal/testdb/enttest/ent"
	"github.com/ormlock/ormlock/internal/testdb/enttest/ent/item"
)

var errBoom = errors.New("chaos: fn failed on purpose")

// boomPanic is the value fn panics with.
type boomPanic struct{ op int }

// behaviour is what fn does in one soak operation.
type behaviour int

const (
	behOK          behaviour = iota // fn succeeds
	behError                        // fn returns errBoom
	behPanic                        // fn panics with boomPanic
	behCancel                       // the caller's context is cancelled while fn runs
	behPreCanceled                  // the context is cancelled before the call
	behDeadline                     // a deadline of a few milliseconds, wherever it falls
)

var behNames = [...]string{"ok", "error", "panic", "cancel-mid-fn", "pre-cancelled", "short-deadline"}

func pickBehaviour(rng *rand.Rand) behaviour {
	switch p := rng.IntN(100); {
	case p < 50:
		return behOK
	case p < 65:
		return behError
	case p < 75:
		return behPanic
	case p < 85:
		return behCancel
	case p < 90:
		return behPreCanceled
	default:
		return behDeadline
	}
}

// TestSoak runs mixed operations (1,500 per server kind; under -soak
// ORMLOCK_SOAK_OPS, default 100,000) from 6 goroutines on 3 instances, two GORM pools and one ent
// client, on shared keys: gormlock Transaction, Session and RunOnce, entlock
// Transaction and Session, a fifth of them at REPEATABLE READ, with fn succeeding, failing, panicking, or its
// context cancelled before or during the call or cut by a short deadline.
// Asserted: at most one holder inside fn per key at any instant; every
// outcome is the one the behaviour allows; a Transaction or RunOnce wrote its
// row exactly when it returned nil; each RunOnce slot has at most one
// committed run, matching the ledger; afterwards no advisory or named lock
// is left and no connection is in use (testdb.AssertNoLeaks).
func TestSoak(t *testing.T) {
	total := pick(1500, soakOps())
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		soakRun(t, k, total)
	})
}

func soakRun(t *testing.T, k testdb.Kind, total int) {
	admin := testdb.AdminDB(t, k)
	gdb0, sql0 := openGorm(t, k)
	gdb1, _ := openGorm(t, k)
	gdbs := []*gorm.DB{gdb0, gdb1}
	client, _ := enttest.Open(t, k)
	owner := enttest.Owner(t, k)
	work := workTable(t, sql0, admin)
	led := ledgerTable(t, gdb0, admin)

	keys := []string{"chaos-soak-a-" + string(k), "chaos-soak-b-" + string(k)}
	job := "chaos-soak-" + string(k)
	slots := max(total/15, 1)
	base := time.Date(2035, 5, 5, 0, 0, 0, 0, time.UTC)
	slotOf := func(i int) time.Time { return base.Add(time.Duration(i) * time.Minute) }

	var (
		keyIn    = [2]*overlaps{new(overlaps), new(overlaps)}
		slotIn   = make([]*overlaps, slots)
		next     atomic.Int64
		results  tally
		perBeh   [len(behNames)]tally
		mu       sync.Mutex
		okTx     = map[string]bool{} // op ids whose Transaction/RunOnce returned nil (gorm)
		okEnt    = map[int]bool{}    // op ids whose entlock Transaction returned nil
		failures []string
		wg       sync.WaitGroup
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(failures) < 20 {
			failures = append(failures, fmt.Sprintf(format, args...))
		}
	}

	op := func(id int, inst int, rng *rand.Rand) {
		beh := pickBehaviour(rng)
		ki := rng.IntN(len(keys))
		key := keys[ki]
		var opts []ormlock.Option
		if rng.IntN(4) == 0 {
			opts = append(opts, ormlock.WithWait(time.Duration(rng.IntN(30))*time.Millisecond))
		}
		if rng.IntN(5) == 0 { // PostgreSQL: the split protocol (lock on its own connection)
			opts = append(opts, ormlock.WithTxOptions(&sql.TxOptions{Isolation: sql.LevelRepeatableRead}))
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		switch beh {
		case behPreCanceled:
			cancel()
		case behDeadline:
			ctx, cancel = context.WithTimeout(ctx, time.Duration(1+rng.IntN(5))*time.Millisecond)
			defer cancel()
		}
		called := false
		// body is fn's common part: enter the critical section of h, write
		// through write (nil: nothing to write), then behave.
		var in *overlaps // the tracker of the key fn ran under
		body := func(h *overlaps, write func() error) error {
			called, in = true, h
			defer h.enter(id)()
			if write != nil {
				if err := write(); err != nil {
					return err
				}
			}
			if rng.IntN(3) == 0 {
				time.Sleep(time.Duration(rng.IntN(1000)) * time.Microsecond)
			}
			switch beh {
			case behError:
				return errBoom
			case behPanic:
				panic(boomPanic{id})
			case behCancel:
				cancel()
				if rng.IntN(2) == 0 {
					return ctx.Err()
				}
				return nil // the verb must still see the cancellation
			}
			return nil
		}
		opID := "op-" + strconv.Itoa(id)
		var verb string
		var err error
		var recovered any
		func() {
			defer func() { recovered = recover() }()
			if inst < 2 {
				db := gdbs[inst].WithContext(ctx)
				switch p := rng.IntN(100); {
				case p < 40:
					verb = "gorm.Transaction"
					err = gormlock.Transaction(db, key, func(tx *gorm.DB) error {
						return body(keyIn[ki], func() error {
							return tx.Exec("INSERT INTO "+work+" (slot, who) VALUES (?, ?)", "tx", opID).Error
						})
					}, opts...)
				case p < 60:
					verb = "gorm.Session"
					err = gormlock.Session(db, key, func(ctx context.Context) error {
						return body(keyIn[ki], nil)
					}, append(opts, ormlock.WithKeepalive(time.Second))...)
				default:
					verb = "gorm.RunOnce"
					si := rng.IntN(slots)
					slot := slotOf(si)
					err = gormlock.RunOnce(db, job, slot, func(tx *gorm.DB) error {
						return body(slotIn[si], func() error {
							return tx.Exec("INSERT INTO "+work+" (slot, who) VALUES (?, ?)", slot.Format(time.RFC3339), opID).Error
						})
					}, append(opts, ormlock.WithLedgerTable(led))...)
				}
			} else {
				switch p := rng.IntN(100); {
				case p < 60:
					verb = "ent.Transaction"
					err = entlock.Transaction(ctx, client, key, func(tx *ent.Tx) error {
						return body(keyIn[ki], func() error {
							return tx.Item.Create().SetOwner(owner).SetN(id).Exec(ctx)
						})
					}, opts...)
				default:
					verb = "ent.Session"
					err = entlock.Session(ctx, client, key, func(ctx context.Context) error {
						return body(keyIn[ki], nil)
					}, append(opts, ormlock.WithKeepalive(time.Second))...)
				}
			}
		}()

		if in != nil {
			res := err
			if recovered != nil {
				res = fmt.Errorf("panic: %v", recovered)
			}
			in.done(id, res, verb, behNames[beh])
		}
		kind := outcome(err)
		if recovered != nil {
			if bp, ok := recovered.(boomPanic); !ok || bp.id() != id {
				fail("op %d %s: unexpected panic %v", id, verb, recovered)
			}
			kind = "panic"
		} else if errors.Is(err, errBoom) {
			kind = "fn_error"
		}
		results.add(verb+":"+kind, err)
		perBeh[beh].add(kind, err)

		acquiredOutcomes := map[string]bool{"not_acquired": true, "already_done": true}
		switch beh {
		case behOK:
			if kind != "ok" && !acquiredOutcomes[kind] {
				fail("op %d %s ok: %v", id, verb, err)
			}
		case behError:
			if kind != "fn_error" && !acquiredOutcomes[kind] {
				fail("op %d %s fn error: %v", id, verb, err)
			}
		case behPanic:
			if kind != "panic" && !acquiredOutcomes[kind] {
				fail("op %d %s panic: %v (recovered %v)", id, verb, err, recovered)
			}
		case behCancel:
			switch {
			case !called && acquiredOutcomes[kind]:
			case verb == "gorm.Session" || verb == "ent.Session":
				// the caller's cancellation is not a loss: fn's result stands
				if kind != "ok" && kind != "context" {
					fail("op %d %s cancel mid-fn: %v", id, verb, err)
				}
			case !errors.Is(err, context.Canceled):
				fail("op %d %s cancel mid-fn: %v, want context.Canceled", id, verb, err)
			}
		case behPreCanceled:
			if called || kind != "not_acquired(ctx)" || !errors.Is(err, context.Canceled) {
				fail("op %d %s pre-cancelled: called=%v err=%v, want ErrNotAcquired and context.Canceled", id, verb, called, err)
			}
		case behDeadline:
			// anything but a panic may happen; the commit check below holds
		}
		if err == nil && recovered == nil {
			mu.Lock()
			switch verb {
			case "gorm.Transaction", "gorm.RunOnce":
				okTx[opID] = true
			case "ent.Transaction":
				okEnt[id] = true
			}
			mu.Unlock()
		}
	}

	for i := range slotIn {
		slotIn[i] = new(overlaps)
	}
	start := time.Now()
	for w := range 6 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w)+1, uint64(time.Now().UnixNano())))
			inst := w % 3
			for {
				id := int(next.Add(1))
				if id > total {
					return
				}
				op(id, inst, rng)
			}
		})
	}
	wg.Wait()
	took := time.Since(start)

	for _, f := range failures {
		t.Error(f)
	}
	// Two calls inside fn together: only when the earlier one's lock
	// connection was closed under it by the driver, because the caller's
	// context ended during one of fn's statements (go-sql-driver/mysql
	// always closes the connection then, pgx by default): the server then
	// frees the lock while fn is returning that statement's error, and the
	// transaction cannot commit.
	ctxLost := func(err error) bool {
		return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
	}
	overlapsSeen := 0
	for i := range keyIn {
		keyIn[i].check(t, keys[i], ctxLost)
		overlapsSeen += keyIn[i].count()
	}
	for i := range slotIn {
		slotIn[i].check(t, fmt.Sprintf("RunOnce slot %d", i), ctxLost)
		overlapsSeen += slotIn[i].count()
	}

	// committed rows == calls that returned nil
	committed := map[string]string{} // op id -> slot column
	rows, err := admin.Query("SELECT slot, who FROM " + work)
	if err != nil {
		t.Fatal(err)
	}
	perSlot := map[string]int{}
	for rows.Next() {
		var slot, who string
		if err := rows.Scan(&slot, &who); err != nil {
			t.Fatal(err)
		}
		committed[who] = slot
		if slot != "tx" {
			perSlot[slot]++
		}
	}
	rows.Close()
	for id := range committed {
		if !okTx[id] {
			t.Errorf("%s committed a row but its call did not return nil", id)
		}
	}
	for id := range okTx {
		if _, ok := committed[id]; !ok {
			t.Errorf("%s returned nil but its row is missing", id)
		}
	}
	items, err := entItems(admin, k, owner)
	if err != nil {
		t.Fatal(err)
	}
	for n := range items {
		if !okEnt[n] {
			t.Errorf("ent op %d committed an item but its call did not return nil", n)
		}
	}
	for n := range okEnt {
		if !items[n] {
			t.Errorf("ent op %d returned nil but its item is missing", n)
		}
	}
	rs, err := gormlock.Runs(gdb1, job, slots+10, ormlock.WithLedgerTable(led))
	if err != nil {
		t.Fatal(err)
	}
	done := 0
	for _, r := range rs {
		s := r.Slot.UTC().Format(time.RFC3339)
		if r.Status == "done" {
			done++
			if perSlot[s] != 1 {
				t.Errorf("slot %s done, %d work rows", s, perSlot[s])
			}
		}
	}
	for s, n := range perSlot {
		if n != 1 {
			t.Errorf("slot %s: %d committed runs", s, n)
		}
	}
	if done != len(perSlot) {
		t.Errorf("ledger: %d done slots, work rows for %d slots", done, len(perSlot))
	}
	t.Logf("figure: soak on %s: %d ops in %v from 6 goroutines on 3 instances; %s; RunOnce slots done %d of %d; calls inside fn together (the earlier one's connection closed by its context, as asserted): %d",
		k, total, took.Round(time.Millisecond), results.String(), done, slots, overlapsSeen)
	for b := range behNames {
		t.Logf("  behaviour %s: %s", behNames[b], perBeh[b].String())
	}
	if msgs := results.messages(); msgs != "" {
		t.Logf("errors seen:\n%s", msgs)
	}
}

func (p boomPanic) id() int { return p.op }

// entItems returns the n of the items of owner, read through admin.
func entItems(admin *sql.DB, k testdb.Kind, owner string) (map[int]bool, error) {
	q := "SELECT " + item.FieldN + " FROM " + item.Table + " WHERE " + item.FieldOwner + " = ?"
	if k.Dialect() == "postgres" {
		q = dollar(q)
	}
	rows, err := admin.Query(q, owner)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int]bool{}
	for rows.Next() {
		var n int
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		out[n] = true
	}
	return out, rows.Err()
}

// TestIsolationContention: 3 GORM pools and 1 ent client run the same
// critical section (read the largest n, insert n+1) on one key, try-once
// and with a wait, at REPEATABLE READ and SERIALIZABLE, 40 calls each (400
// under -soak). Asserted: every committed n is distinct and they form
// 1..count: no holder read a snapshot older than the previous holder's
// commit, and no call failed with a serialization error.
func TestIsolationContention(t *testing.T) {
	rounds := pick(40, 400)
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		for _, iso := range []sql.IsolationLevel{sql.LevelRepeatableRead, sql.LevelSerializable} {
			t.Run(iso.String(), func(t *testing.T) {
				admin := testdb.AdminDB(t, k)
				var dbs []*gorm.DB
				for range 3 {
					db, _ := openGorm(t, k)
					dbs = append(dbs, db)
				}
				client, _ := enttest.Open(t, k)
				owner := enttest.Owner(t, k)
				key := "chaos-iso-" + t.Name()
				txo := ormlock.WithTxOptions(&sql.TxOptions{Isolation: iso})
				var (
					mu       sync.Mutex
					won      int
					failures []string
					wg       sync.WaitGroup
				)
				outcome := func(err error) {
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						won++
					case errors.Is(err, ormlock.ErrNotAcquired):
					case len(failures) < 10:
						failures = append(failures, err.Error())
					}
				}
				next := func(read func() (int, error), write func(n int) error) error {
					n, err := read()
					if err != nil {
						return err
					}
					return write(n + 1)
				}
				start := time.Now()
				for i := range 4 {
					wg.Go(func() {
						for r := range rounds {
							opts := []ormlock.Option{txo}
							if r%2 == 1 {
								opts = append(opts, ormlock.WithWait(2*time.Second))
							}
							if i < 3 {
								outcome(gormlock.Transaction(dbs[i], key, func(tx *gorm.DB) error {
									return next(func() (int, error) {
										var n int
										err := tx.Raw("SELECT COALESCE(MAX(n), 0) FROM items WHERE owner = ?", owner).Scan(&n).Error
										return n, err
									}, func(n int) error {
										return tx.Exec("INSERT INTO items (owner, n) VALUES (?, ?)", owner, n).Error
									})
								}, opts...))
								continue
							}
							ctx := context.Background()
							outcome(entlock.Transaction(ctx, client, key, func(tx *ent.Tx) error {
								return next(func() (int, error) {
									items, err := tx.Item.Query().Where(item.Owner(owner)).All(ctx)
									top := 0
									for _, it := range items {
										top = max(top, it.N)
									}
									return top, err
								}, func(n int) error { return tx.Item.Create().SetOwner(owner).SetN(n).Exec(ctx) })
							}, opts...))
						}
					})
				}
				wg.Wait()
				took := time.Since(start)
				for _, f := range failures {
					t.Error(f)
				}
				var total, distinct, top int
				q := "SELECT COUNT(*), COUNT(DISTINCT n), COALESCE(MAX(n), 0) FROM items WHERE owner = ?"
				if k.Dialect() == "postgres" {
					q = dollar(q)
				}
				if err := admin.QueryRow(q, owner).Scan(&total, &distinct, &top); err != nil {
					t.Fatal(err)
				}
				if total != won || distinct != total || top != total {
					t.Fatalf("%d calls returned nil; rows %d, distinct %d, max %d: a holder read a stale snapshot", won, total, distinct, top)
				}
				t.Logf("figure: isolation %s on %s: %d calls (3 GORM pools, 1 ent client; try-once and wait), %d committed, 1..%d each once, 0 serialization failures, in %v",
					iso, k, 4*rounds, won, total, took.Round(time.Millisecond))
			})
		}
	})
}

// TestDeadlineFaults: calls with a deadline against an exhausted pool
// (MaxOpenConns 1, its connection held elsewhere; every server), a frozen
// idle backend (SIGSTOP before the call; PostgreSQL) and a backend frozen
// while fn runs (PostgreSQL and PgBouncer: the COMMIT is cut at the
// deadline). Asserted: each call returns within its deadline + 2 s; before
// the lock the error matches ErrNotAcquired and DeadlineExceeded, after it
// DeadlineExceeded; afterwards no lock is held and no connection in use.
// 3 rounds per case (20 under -soak).
func TestDeadlineFaults(t *testing.T) {
	rounds := pick(3, 20)
	const deadline = 500 * time.Millisecond
	call := func(t *testing.T, db *gorm.DB, key string, fn func(tx *gorm.DB) error, opts ...ormlock.Option) (time.Duration, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		start := time.Now()
		err := gormlock.Transaction(db.WithContext(ctx), key, fn, opts...)
		took := time.Since(start)
		if took > deadline+2*time.Second {
			t.Errorf("returned after %v, deadline %v", took, deadline)
		}
		return took, err
	}
	nop := func(*gorm.DB) error { return nil }
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		t.Run("PoolExhausted", func(t *testing.T) {
			db, sqlDB := openGorm(t, k)
			sqlDB.SetMaxOpenConns(1)
			conn, err := sqlDB.Conn(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			var took stats
			for r := range rounds {
				d, err := call(t, db, fmt.Sprint("chaos-pool-", k, r), nop, ormlock.WithWait(time.Minute))
				took = append(took, d)
				if !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("round %d: %v", r, err)
				}
			}
			t.Logf("figure: exhausted pool on %s, deadline %v -> ErrNotAcquired+DeadlineExceeded after %v", k, deadline, took)
		})
		if k.Dialect() != "postgres" {
			return // freezing one backend needs a process per connection
		}
		if k == testdb.Postgres {
			t.Run("FrozenIdleBackend", func(t *testing.T) {
				db, sqlDB := openGorm(t, k)
				sqlDB.SetMaxIdleConns(1)
				var took stats
				for r := range rounds {
					resume := faults.Freeze(t, faults.PGBackendPID(t, sqlDB))
					d, err := call(t, db, fmt.Sprint("chaos-frozen-idle-", r), nop)
					resume()
					took = append(took, d)
					if !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("round %d: %v", r, err)
					}
				}
				t.Logf("figure: frozen idle backend on %s, deadline %v -> ErrNotAcquired+DeadlineExceeded after %v", k, deadline, took)
			})
		}
		for _, iso := range []sql.IsolationLevel{sql.LevelReadCommitted, sql.LevelRepeatableRead} {
			t.Run("FrozenDuringFn/"+iso.String(), func(t *testing.T) {
				db, _ := openGorm(t, k)
				var took stats
				for r := range rounds {
					var resume func()
					d, err := call(t, db, fmt.Sprint("chaos-frozen-fn-", k, iso, r), func(tx *gorm.DB) error {
						var pid int
						if err := tx.Raw("SELECT pg_backend_pid()").Scan(&pid).Error; err != nil {
							return err
						}
						resume = faults.Freeze(t, pid)
						return nil
					}, ormlock.WithTxOptions(&sql.TxOptions{Isolation: iso}))
					if resume != nil {
						resume()
					}
					took = append(took, d)
					if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ormlock.ErrNotAcquired) {
						t.Errorf("round %d: %v, want DeadlineExceeded after the lock", r, err)
					}
				}
				t.Logf("figure: backend frozen during fn on %s (%s), deadline %v -> COMMIT cut, DeadlineExceeded after %v", k, iso, deadline, took)
			})
		}
	})
}
