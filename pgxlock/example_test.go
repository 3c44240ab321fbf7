package pgxlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/pgxlock"
)

var pool *pgxpool.Pool // pgxpool.New(ctx, "postgres://...")

func ExampleTransaction() {
	ctx := context.Background()
	err := pgxlock.Transaction(ctx, pool, "daily-settlement", func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO settlements (day) VALUES ($1)", time.Now().Format(time.DateOnly))
		return err
	}, ormlock.WithWait(5*time.Second))
	if errors.Is(err, ormlock.ErrNotAcquired) {
		fmt.Println("another replica settles today")
	}
}

func ExampleSession() {
	ctx := context.Background()
	err := pgxlock.Session(ctx, pool, "reindex", func(ctx context.Context) error {
		_, err := pool.Exec(ctx, "REINDEX TABLE settlements") // through the pool, under the lock
		return err
	})
	if errors.Is(err, ormlock.ErrLockLost) {
		fmt.Println("the lock was lost while reindexing")
	}
}

func ExampleRunScheduled() {
	ctx := context.Background()
	if err := pgxlock.Migrate(ctx, pool); err != nil { // once, at start-up
		panic(err)
	}
	hourly, err := ormlock.Every(time.Hour, time.UTC)
	if err != nil {
		panic(err)
	}
	err = pgxlock.RunScheduled(ctx, pool, "hourly-report", hourly, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO reports (made) VALUES (now())")
		return err
	})
	if errors.Is(err, ormlock.ErrAlreadyDone) {
		fmt.Println("another replica made this hour's report")
	}
}

func ExampleCheckFenced() {
	ctx := context.Background()
	err := pgxlock.Transaction(ctx, pool, "account-7", func(ctx context.Context, tx pgx.Tx) error {
		tok, _ := ormlock.FencingToken(ctx)
		// elsewhere, on the resource that outlives the lock
		return pgxlock.CheckFenced(pool.Exec(ctx,
			"UPDATE accounts SET balance = balance - 10, fence = $1 WHERE id = 7 AND fence <= $1", tok))
	}, ormlock.WithFencing())
	if errors.Is(err, ormlock.ErrStaleToken) {
		fmt.Println("a newer holder wrote first")
	}
}

func ExampleHolder() {
	h, err := pgxlock.Holder(context.Background(), pool, "reindex")
	if err == nil && h.Held {
		fmt.Println("held by pid", h.PID)
	}
}

// Queries stands for the type sqlc generates for your queries (with
// sql_package pgx/v5): New(pool) on the pool, WithTx(tx) on a transaction.
type Queries struct {
	db interface {
		Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	}
}

func (q *Queries) WithTx(tx pgx.Tx) *Queries { return &Queries{db: tx} }

func (q *Queries) CreateSettlement(ctx context.Context, day string) error {
	_, err := q.db.Exec(ctx, "INSERT INTO settlements (day) VALUES ($1)", day)
	return err
}

var queries = &Queries{db: pool}

// Lock in pgx.BeginFunc's transaction, with sqlc's queries on it: the lock
// is held until BeginFunc commits or rolls back.
func ExampleLock() {
	ctx := context.Background()
	day := time.Now().Format(time.DateOnly)
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := pgxlock.Lock(ctx, tx, "settle-"+day); err != nil {
			return err
		}
		return queries.WithTx(tx).CreateSettlement(ctx, day)
	})
	if errors.Is(err, ormlock.ErrNotAcquired) {
		fmt.Println("another replica settles today")
	}
}
