package gormlock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/gormtest"
	"github.com/ormlock/ormlock/internal/testdb"
)

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

// TestFencingContention: several pools (replicas) take one key over and over
// with Transaction (commit, rollback, panic, a killed connection, every
// isolation level) and Session; each holder records its token while it holds
// the lock, so the record is in lock order, and every token must be greater
// than the one before. A few seconds per server; ORMLOCK_SOAK=1 runs a
// minute.
func TestFencingContention(t *testing.T) {
	run := 3 * time.Second
	if os.Getenv("ORMLOCK_SOAK") != "" {
		run = time.Minute
	}
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		first, _ := gormtest.Open(t, k)
		tbl := fenceLedger(t, k, first)
		key := "fence-contention-" + string(k)
		var log tokenLog
		counts := map[string]int{}
		var cmu sync.Mutex
		deadline := time.Now().Add(run)
		var wg sync.WaitGroup
		for p := range 3 {
			db, sqlDB := gormtest.Open(t, k)
			sqlDB.SetMaxOpenConns(4)
			for w := range 2 {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(p), uint64(w)))
					for time.Now().Before(deadline) {
						what, err := fencedStep(r, k, db, key, &log, tbl)
						cmu.Lock()
						counts[what]++
						cmu.Unlock()
						if err != nil {
							t.Errorf("%s: %v", what, err)
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
		t.Logf("%d fenced acquisitions in %v, last token %d: %v", len(log.toks), run, log.toks[len(log.toks)-1], counts)
		if len(log.toks) < 100 {
			t.Errorf("only %d acquisitions", len(log.toks))
		}
	})
}

var errRollback = errors.New("roll back")

// fencedStep runs one random fenced acquisition of key on db and reports
// what it did; the error is an unexpected outcome.
func fencedStep(r *rand.Rand, k testdb.Kind, db *gorm.DB, key string, log *tokenLog, tbl ormlock.Option) (string, error) {
	opts := []ormlock.Option{tbl, ormlock.WithFencing(), ormlock.WithWait(10 * time.Second)}
	record := func(tok int64, ok bool) error {
		if !ok {
			return errors.New("no token")
		}
		log.add(tok)
		return nil
	}
	switch n := r.IntN(10); n {
	case 0, 1, 2: // commit, at some isolation level
		o := append(opts, isolationOpt(n))
		return "commit", gormlock.Transaction(db, key, func(tx *gorm.DB) error { return record(gormlock.FencingToken(tx)) }, o...)
	case 3, 4:
		err := gormlock.Transaction(db, key, func(tx *gorm.DB) error {
			if err := record(gormlock.FencingToken(tx)); err != nil {
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
			err = gormlock.Transaction(db, key, func(tx *gorm.DB) error {
				_ = record(gormlock.FencingToken(tx))
				panic("boom")
			}, opts...)
		}()
		return "panic", err
	case 6: // the holder's connection dies under fn
		err := gormlock.Transaction(db, key, func(tx *gorm.DB) error {
			if err := record(gormlock.FencingToken(tx)); err != nil {
				return err
			}
			if k.Dialect() == "postgres" {
				return tx.Exec("SELECT pg_terminate_backend(pg_backend_pid())").Error
			}
			var id int64
			if err := tx.Raw("SELECT CONNECTION_ID()").Scan(&id).Error; err != nil {
				return err
			}
			return tx.Exec(fmt.Sprintf("KILL %d", id)).Error
		}, opts...)
		if err == nil {
			return "killed", errors.New("a killed connection committed")
		}
		return "killed", nil
	default:
		return "session", gormlock.Session(db, key, func(ctx context.Context) error {
			return record(ormlock.FencingToken(ctx))
		}, opts...)
	}
}

func isolationOpt(n int) ormlock.Option {
	switch n {
	case 1:
		return ormlock.WithTxOptions(&sqlTxRepeatable)
	case 2:
		return ormlock.WithTxOptions(&sqlTxSerializable)
	}
	return nil
}

var (
	sqlTxRepeatable   = sql.TxOptions{Isolation: sql.LevelRepeatableRead}
	sqlTxSerializable = sql.TxOptions{Isolation: sql.LevelSerializable}
)
