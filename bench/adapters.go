package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ormlock/ormlock/keyhash"
	"github.com/ormlock/ormlock/pgxlock"
	"github.com/ormlock/ormlock/sqllock"
)

func onPostgres(d Dialect) bool { return d == Postgres }

// ---- sqllock.Transaction and a plain database/sql transaction ----

type sqlTx struct{ *sqlBase }

func openSQLTransaction(_ context.Context, t Target, conns int) (Instance, error) {
	b, err := openSQLBase(t, conns)
	if err != nil {
		return nil, err
	}
	return sqlTx{b}, nil
}

func (s sqlTx) Bind(key string, crit func()) Attempt {
	fn := func(context.Context, *sql.Tx) error { crit(); return nil }
	db := s.db
	return func(ctx context.Context) (bool, error) {
		return outcome(sqllock.Transaction(ctx, db, key, fn))
	}
}

type sqlNoLock struct{ sqlTx }

var openSQLNoLock = sibling(openSQLTransaction, 0, func(i sqlTx) sqlNoLock { return sqlNoLock{i} })

// Bind is db.BeginTx and Commit with nothing in between: what database/sql
// costs without a lock.
func (s sqlNoLock) Bind(_ string, crit func()) Attempt {
	db := s.db
	return func(ctx context.Context) (bool, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return false, err
		}
		crit()
		return true, tx.Commit()
	}
}

// ---- pgx on its own pool: pgxlock.Transaction, hand-written, plain ----

// pgxBase is a pgxpool on a PostgreSQL target, beside the sqlBase whose
// Hold the contenders share (its contender pool holds one connection).
type pgxBase struct {
	*sqlBase
	pool *pgxpool.Pool
}

func openPgxBase(t Target, conns int) (*pgxBase, error) {
	b, err := openSQLBase(t, 1)
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(t.DSN)
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("bench: pgxpool config of %s: %w", t.Name, err)
	}
	cfg.MaxConns, cfg.MinConns = int32(conns), int32(conns)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("bench: pgxpool on %s: %w", t.Name, err)
	}
	if err := pool.Ping(context.Background()); err != nil {
		pool.Close()
		b.Close()
		return nil, fmt.Errorf("bench: ping %s: %w", t.Name, err)
	}
	return &pgxBase{b, pool}, nil
}

func (p *pgxBase) Close() error {
	p.pool.Close()
	return p.sqlBase.Close()
}

type pgxTx struct{ *pgxBase }

func openPgxTransaction(_ context.Context, t Target, conns int) (Instance, error) {
	b, err := openPgxBase(t, conns)
	if err != nil {
		return nil, err
	}
	return pgxTx{b}, nil
}

func (p pgxTx) Bind(key string, crit func()) Attempt {
	fn := func(context.Context, pgx.Tx) error { crit(); return nil }
	pool := p.pool
	return func(ctx context.Context) (bool, error) {
		return outcome(pgxlock.Transaction(ctx, pool, key, fn))
	}
}

type pgxHandwritten struct{ pgxTx }

var openPgxHandwritten = sibling(openPgxTransaction, 0, func(i pgxTx) pgxHandwritten { return pgxHandwritten{i} })

// Bind is the protocol as a careful user writes it with pgx alone: BEGIN,
// the try-lock, COMMIT (or ROLLBACK), the key derived on every attempt.
func (p pgxHandwritten) Bind(key string, crit func()) Attempt {
	pool := p.pool
	return func(ctx context.Context) (bool, error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return false, err
		}
		var ok bool
		if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1)", keyhash.Int64(key)).Scan(&ok); err != nil || !ok {
			return false, errors.Join(err, tx.Rollback(ctx))
		}
		crit()
		return true, tx.Commit(ctx)
	}
}

type pgxNoLock struct{ pgxTx }

var openPgxNoLock = sibling(openPgxTransaction, 0, func(i pgxTx) pgxNoLock { return pgxNoLock{i} })

// Bind is pool.Begin and Commit with nothing in between: what pgx costs
// without a lock.
func (p pgxNoLock) Bind(_ string, crit func()) Attempt {
	pool := p.pool
	return func(ctx context.Context) (bool, error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return false, err
		}
		crit()
		return true, tx.Commit(ctx)
	}
}
