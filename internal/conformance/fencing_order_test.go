package conformance_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// Fencing tokens keep the lock's order through faults: replicas of every
// adapter contending with commits, rollbacks, panics and killed connections;
// a server crash; and a paused holder whose lock was taken over.

// runsOn reports whether adapter a runs on servers of kind k (pgxlock is
// PostgreSQL only).
func runsOn(a adapter, k testdb.Kind) bool { return a.name != "pgxlock" || k.Dialect() == "postgres" }

// tokenLog records the tokens fn saw, in the order the lock let fn run.
type tokenLog struct {
	mu   sync.Mutex
	toks []int64
}

func (l *tokenLog) add(tok int64) {
	l.mu.Lock()
	l.toks = append(l.toks, tok)
	l.mu.Unlock()
}

// TestFencingContention: one replica (pool) of every adapter takes one key
// over and over with Transaction (commit, rollback, panic, a killed
// connection, every isolation level) and Session; each holder records its
// token while it holds the lock, so the record is in lock order, and every
// token must be greater than the one before, whichever adapter drew it. A
// few seconds per server; ORMLOCK_SOAK=1 runs a minute.
func TestFencingContention(t *testing.T) {
	run := 3 * time.Second
	if os.Getenv("ORMLOCK_SOAK") != "" {
		run = time.Minute
	}
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		var rs []runner
		var names []string
		for _, a := range adapters {
			if runsOn(a, k) {
				r := openRunner(t, a, k)
				r.Pool().SetMaxOpenConns(4)
				rs, names = append(rs, r), append(names, a.name)
			}
		}
		tbl := ormlock.WithLedgerTable(ledgerTable(t, k, rs[0]))
		key := "fence-contention-" + string(k)
		var log tokenLog
		counts := map[string]int{}
		var cmu sync.Mutex
		deadline := time.Now().Add(run)
		var wg sync.WaitGroup
		for p, r := range rs {
			for w := range 2 {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(p), uint64(w)))
					for time.Now().Before(deadline) {
						what, err := fencedStep(rng, k, r, key, &log, tbl)
						cmu.Lock()
						counts[what]++
						cmu.Unlock()
						if err != nil {
							t.Errorf("%s %s: %v", names[p], what, err)
							return
						}
					}
				})
			}
		}
		wg.Wait()
		log.mu.Lock()
		defer log.mu.Unlock()
		for i := 1; i < len(log.toks); i++ {
			if log.toks[i] <= log.toks[i-1] {
				t.Fatalf("token %d (acquisition %d) after %d", log.toks[i], i, log.toks[i-1])
			}
		}
		if len(log.toks) < 100 {
			t.Fatalf("only %d acquisitions", len(log.toks))
		}
		t.Logf("%d fenced acquisitions by %v in %v, last token %d: %v", len(log.toks), names, run, log.toks[len(log.toks)-1], counts)
	})
}

var errRollback = errors.New("roll back")

// fencedStep runs one random fenced acquisition of key through r and
// reports what it did; the error is an unexpected outcome.
func fencedStep(rng *rand.Rand, k testdb.Kind, r runner, key string, log *tokenLog, tbl ormlock.Option) (string, error) {
	ctx := context.Background()
	opts := []ormlock.Option{tbl, ormlock.WithFencing(), ormlock.WithWait(10 * time.Second)}
	record := func(tok int64, ok bool) error {
		if !ok {
			return errors.New("no token")
		}
		log.add(tok)
		return nil
	}
	switch n := rng.IntN(10); n {
	case 0, 1, 2: // commit, at some isolation level
		o := opts
		if n > 0 {
			o = append(o, ormlock.WithTxOptions(&sql.TxOptions{Isolation: []sql.IsolationLevel{sql.LevelRepeatableRead, sql.LevelSerializable}[n-1]}))
		}
		return "commit", r.Transaction(ctx, key, func(tx txn) error { return record(tx.FencingToken()) }, o...)
	case 3, 4:
		err := r.Transaction(ctx, key, func(tx txn) error {
			if err := record(tx.FencingToken()); err != nil {
				return err
			}
			return errRollback
		}, opts...)
		if errors.Is(err, errRollback) {
			err = nil
		}
		return "rollback", err
	case 5:
		var err error
		func() {
			defer func() {
				if p := recover(); p == nil {
					err = errors.New("panic lost")
				}
			}()
			err = r.Transaction(ctx, key, func(tx txn) error {
				_ = record(tx.FencingToken())
				panic("boom")
			}, opts...)
		}()
		return "panic", err
	case 6: // the holder's connection dies under fn
		err := r.Transaction(ctx, key, func(tx txn) error {
			if err := record(tx.FencingToken()); err != nil {
				return err
			}
			if k.Dialect() == "postgres" {
				return tx.Exec("SELECT pg_terminate_backend(pg_backend_pid())")
			}
			id, err := tx.QueryInt("SELECT CONNECTION_ID()")
			if err != nil {
				return err
			}
			return tx.Exec(fmt.Sprintf("KILL %d", id))
		}, opts...)
		if err == nil {
			return "killed", errors.New("a killed connection committed")
		}
		return "killed", nil
	default:
		return "session", r.Session(ctx, key, func(ctx context.Context) error {
			return record(ormlock.FencingToken(ctx))
		}, opts...)
	}
}

// TestFencingCrash is the durability case: holders of every adapter take
// tokens and roll back (a rolled-back holder may have used its token outside
// the database), the server is killed with SIGKILL at once and restarted,
// and every adapter's next token is greater than every token handed out
// before the crash.
//
// The test servers run with synchronous_commit=off (PostgreSQL), which the
// issuance overrides for its own transaction, and MariaDB with
// innodb_flush_log_at_trx_commit=0, which no session can override: the test
// sets it to 1, the default and what fencing requires (docs/PROTOCOL.md).
func TestFencingCrash(t *testing.T) {
	kinds := testdb.Kinds()
	srvs := testdb.StartAll(t, kinds...)
	for i, k := range kinds {
		t.Run(string(k), func(t *testing.T) {
			s := srvs[i]
			target := s // the server that runs the SQL
			if k == testdb.PgBouncer {
				target = s.Backend()
			}
			admin, err := sql.Open(k.Driver(), target.AdminDSN())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { admin.Close() })
			if k.Dialect() == "mysql" {
				if _, err := admin.Exec("SET GLOBAL innodb_flush_log_at_trx_commit = 1"); err != nil {
					t.Fatal(err)
				}
			}
			rs := openOnPrivate(t, s, "")
			tbl := ormlock.WithLedgerTable(ledgerTable(t, k, rs[0].r))
			ctx := context.Background()
			key := "fence-crash"
			var last int64
			for i := range 50 {
				p := rs[i%len(rs)]
				err := p.r.Transaction(ctx, key, func(tx txn) error {
					tok, _ := tx.FencingToken()
					if tok <= last {
						t.Errorf("%s: token %d after %d", p.a.name, tok, last)
					}
					last = tok
					return errRollback
				}, tbl, ormlock.WithFencing())
				if !errors.Is(err, errRollback) {
					t.Fatalf("%s: holder %d: %v", p.a.name, i, err)
				}
			}
			crash(t, k.Dialect(), admin)
			target.Restart(t)
			for _, p := range rs {
				for _, db := range []*sql.DB{p.db, p.r.Pool()} {
					db.SetMaxIdleConns(0) // drop the pool's broken connections
					db.SetMaxIdleConns(2)
				}
				var after int64
				deadline := time.Now().Add(30 * time.Second)
				for {
					err := p.r.Transaction(ctx, key, func(tx txn) error {
						after, _ = tx.FencingToken()
						return nil
					}, tbl, ormlock.WithFencing())
					if err == nil {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s after restart: %v", p.a.name, err)
					}
					time.Sleep(100 * time.Millisecond)
				}
				if after <= last {
					t.Fatalf("%s: token after the crash %d, not greater than %d, handed out before it", p.a.name, after, last)
				}
				t.Logf("%s: last token before SIGKILL %d, first after restart %d", p.a.name, last, after)
			}
		})
	}
}

// crash SIGKILLs the server admin is connected to: PostgreSQL's postmaster
// and all its children (so no backend outlives it to flush anything), or
// mariadbd. The test runs as the user that started the servers.
func crash(t *testing.T, dialect string, admin *sql.DB) {
	t.Helper()
	var pidFile string
	if dialect == "postgres" {
		var dir string
		if err := admin.QueryRow("SHOW data_directory").Scan(&dir); err != nil {
			t.Fatal(err)
		}
		pidFile = filepath.Join(dir, "postmaster.pid")
	} else if err := admin.QueryRow("SELECT @@pid_file").Scan(&pidFile); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		t.Fatalf("pid file %s: %v", pidFile, err)
	}
	_ = admin.Close()
	children := childrenOf(pid)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL %d: %v", pid, err)
	}
	for _, c := range children {
		_ = syscall.Kill(c, syscall.SIGKILL)
	}
	for _, p := range append(children, pid) { // wait until they are gone (or zombies)
		for i := 0; i < 100; i++ {
			st, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/stat")
			if err != nil || strings.Contains(string(st), ") Z ") {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// childrenOf lists the processes whose parent is pid (Linux /proc).
func childrenOf(pid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may contain spaces and ')'
		rest := string(st[strings.LastIndexByte(string(st), ')')+1:])
		f := strings.Fields(rest)
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, c)
		}
	}
	return out
}

// TestFencingStaleWrite is the failure fencing exists for, end to end: a
// Session holder pauses (it ignores its context, as a process stopped by a
// GC pause or a frozen VM would), its lock connection dies, a second replica
// takes the lock and writes with its token, and the paused holder wakes and
// writes with its older token: the write is refused (ErrStaleToken, joined
// with the Session's ErrLockLost) and the second replica's value stays.
func TestFencingStaleWrite(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		rA, rB := openRunner(t, a, k), openRunner(t, a, k)
		tbl := ormlock.WithLedgerTable(ledgerTable(t, k, rA))
		table := testdb.Table(t, k, "stale")
		admin := testdb.AdminDB(t, k)
		for _, q := range []string{
			"CREATE TABLE " + table + " (id int PRIMARY KEY, v varchar(32) NOT NULL, fence bigint NOT NULL)",
			"INSERT INTO " + table + " (id, v, fence) VALUES (1, 'initial', 0)",
		} {
			if _, err := admin.Exec(q); err != nil {
				t.Fatal(err)
			}
		}
		key := "fence-stale-" + string(k)
		started, wake := make(chan int64, 1), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- rA.Session(ctx, key, func(ctx context.Context) error {
				tok, _ := ormlock.FencingToken(ctx)
				started <- tok
				<-wake // paused: does not watch ctx
				q := "UPDATE " + table + " SET v = ?, fence = ? WHERE id = 1 AND fence <= ?"
				if k.Dialect() == "postgres" {
					q = "UPDATE " + table + " SET v = $1, fence = $2 WHERE id = 1 AND fence <= $3"
				}
				return ormlock.CheckFenced(rA.Pool().ExecContext(context.Background(), q, "A", tok, tok))
			}, tbl, ormlock.WithFencing(), ormlock.WithKeepalive(200*time.Millisecond))
		}()
		tokA := <-started
		pid, err := lockHolder(ctx, rA, key)
		if err != nil {
			t.Fatal(err)
		}
		testdb.Kill(t, k, pid)
		var tokB int64
		err = rB.Transaction(ctx, key, func(tx txn) error {
			tokB, _ = tx.FencingToken()
			return fencedWrite(k, tx, table, 1, "B", tokB)
		}, tbl, ormlock.WithFencing(), ormlock.WithWait(10*time.Second))
		if err != nil {
			t.Fatalf("second holder: %v", err)
		}
		if tokB <= tokA {
			t.Fatalf("second holder's token %d <= first's %d", tokB, tokA)
		}
		close(wake)
		err = <-done
		if !errors.Is(err, ormlock.ErrStaleToken) || !errors.Is(err, ormlock.ErrLockLost) {
			t.Fatalf("paused holder's Session: %v; want ErrStaleToken and ErrLockLost", err)
		}
		var v string
		if err := admin.QueryRow("SELECT v FROM " + table + " WHERE id = 1").Scan(&v); err != nil || v != "B" {
			t.Fatalf("row v %q (%v), want B", v, err)
		}
	})
}
