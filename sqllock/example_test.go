package sqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/sqllock"
)

var db *sql.DB // opened with sql.Open("pgx", dsn) or sql.Open("mysql", dsn)

func ExampleTransaction() {
	ctx := context.Background()
	err := sqllock.Transaction(ctx, db, "daily-settlement", func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO settlements (day) VALUES ($1)", time.Now().Format(time.DateOnly))
		return err
	}, ormlock.WithWait(5*time.Second))
	if errors.Is(err, ormlock.ErrNotAcquired) {
		fmt.Println("another replica settles today")
	}
}

func ExampleSession() {
	ctx := context.Background()
	err := sqllock.Session(ctx, db, "reindex", func(ctx context.Context) error {
		_, err := db.ExecContext(ctx, "REINDEX TABLE settlements") // through the pool, under the lock
		return err
	})
	if errors.Is(err, ormlock.ErrLockLost) {
		fmt.Println("the lock was lost while reindexing")
	}
}

func ExampleRunScheduled() {
	ctx := context.Background()
	if err := sqllock.Migrate(ctx, db); err != nil { // once, at start-up
		panic(err)
	}
	hourly, err := ormlock.Every(time.Hour, time.UTC)
	if err != nil {
		panic(err)
	}
	err = sqllock.RunScheduled(ctx, db, "hourly-report", hourly, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO reports (made) VALUES (now())")
		return err
	})
	if errors.Is(err, ormlock.ErrAlreadyDone) {
		fmt.Println("another replica made this hour's report")
	}
}

func ExampleHolder() {
	h, err := sqllock.Holder(context.Background(), db, "reindex")
	if err == nil && h.Held {
		fmt.Println("held by", h.ClientAddr)
	}
}

// Queries stands for the type sqlc generates for your queries: New(db) on
// the pool, WithTx(tx) on a transaction.
type Queries struct {
	db interface {
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	}
}

func (q *Queries) WithTx(tx *sql.Tx) *Queries { return &Queries{db: tx} }

func (q *Queries) CreateSettlement(ctx context.Context, day string) error {
	_, err := q.db.ExecContext(ctx, "INSERT INTO settlements (day) VALUES ($1)", day)
	return err
}

var queries = &Queries{db: db}

// Lock in a transaction of your own, with sqlc's queries on it: the lock is
// held until tx commits or rolls back.
func ExampleLock() {
	ctx := context.Background()
	day := time.Now().Format(time.DateOnly)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	defer tx.Rollback() // after Commit, a no-op
	err = sqllock.Lock(ctx, tx, "settle-"+day)
	if errors.Is(err, ormlock.ErrNotAcquired) {
		fmt.Println("another replica settles today") // tx is still usable
		return
	}
	if err != nil {
		panic(err)
	}
	if err := queries.WithTx(tx).CreateSettlement(ctx, day); err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil { // releases the lock
		panic(err)
	}
}

// bunTx stands for bun.Tx, which embeds the *sql.Tx; bunDB for a *bun.DB,
// whose RunInTx begins, commits and rolls back.
type bunTx struct{ *sql.Tx }

var bunDB interface {
	RunInTx(ctx context.Context, opts *sql.TxOptions, fn func(ctx context.Context, tx bunTx) error) error
}

// Lock in bun's RunInTx: tx.Tx is the *sql.Tx under bun's transaction.
func ExampleLock_bun() {
	ctx := context.Background()
	err := bunDB.RunInTx(ctx, nil, func(ctx context.Context, tx bunTx) error {
		if err := sqllock.Lock(ctx, tx.Tx, "rebuild-index", ormlock.WithWait(5*time.Second)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO index_builds (at) VALUES (now())") // or tx.NewInsert()...
		return err
	})
	if errors.Is(err, ormlock.ErrNotAcquired) {
		fmt.Println("another replica rebuilds the index")
	}
}

// A pool whose Transactions cost a plain transaction's two round trips on
// PostgreSQL: database/sql's BEGIN carries the lock. The pool is an
// ordinary *sql.DB for the rest of the program.
func ExampleOpen() {
	pool, err := sqllock.Open("pgx", "postgres://app@db.internal/app") // in place of sql.Open("pgx", ...)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	err = sqllock.Transaction(context.Background(), pool, "daily-settlement", func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO settlements (day) VALUES (CURRENT_DATE)")
		return err
	})
	if errors.Is(err, ormlock.ErrNotAcquired) {
		fmt.Println("another replica settles today")
	}
}

// At most 100 emails a minute per tenant across every replica; an email
// whose transaction rolls back gives its token back.
func ExampleUsage() {
	ctx := context.Background()
	if err := sqllock.Migrate(ctx, db); err != nil { // once: creates the rate table
		return
	}
	limit := ormlock.Rate("emails:tenant-42", 100, time.Minute)
	err := sqllock.Transaction(ctx, db, limit, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO outbox (tenant, body) VALUES ($1, $2)", 42, "hello")
		return err
	})
	if after, ok := ormlock.RetryAfter(err); ok {
		fmt.Println("over the limit; retry after", after)
	}
	u, err := sqllock.Usage(ctx, db, limit)
	if err == nil {
		fmt.Printf("%d of %d used in the last %v\n", u.Used, u.N, u.Per)
	}
}
