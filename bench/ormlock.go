package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	entsql "entgo.io/ent/dialect/sql"
	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb/enttest/ent"
	"github.com/ormlock/ormlock/keyhash"
)

// outcome maps a verb's error to an attempt's result.
func outcome(err error) (bool, error) {
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ormlock.ErrNotAcquired):
		return false, nil
	}
	return false, err
}

// ---- database/sql, hand-written: the baseline ----

type handwritten struct{ *sqlBase }

func openHandwritten(_ context.Context, t Target, conns int) (Instance, error) {
	b, err := openSQLBase(t, conns)
	if err != nil {
		return nil, err
	}
	return handwritten{b}, nil
}

// Bind is the protocol as a careful user writes it with database/sql alone,
// with the same round trips as ormlock and the key derived from the name on
// every attempt, as ormlock does.
func (h handwritten) Bind(key string, crit func()) Attempt {
	db := h.db
	if h.t.Dialect == Postgres {
		return func(ctx context.Context) (bool, error) {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return false, err
			}
			var ok bool
			if err := tx.QueryRowContext(ctx, "SELECT pg_try_advisory_xact_lock($1)", keyhash.Int64(key)).Scan(&ok); err != nil || !ok {
				_ = tx.Rollback()
				return false, err
			}
			crit()
			return true, tx.Commit()
		}
	}
	return func(ctx context.Context) (bool, error) {
		conn, err := db.Conn(ctx)
		if err != nil {
			return false, err
		}
		defer conn.Close()
		name := keyhash.MySQLName("", key)
		var got sql.NullInt64
		if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", name).Scan(&got); err != nil {
			return false, err
		}
		if !got.Valid {
			return false, errors.New("bench: GET_LOCK returned NULL")
		}
		if got.Int64 != 1 {
			return false, nil
		}
		tx, err := conn.BeginTx(ctx, nil)
		if err == nil {
			crit()
			err = tx.Commit()
		}
		var rel sql.NullInt64
		rerr := conn.QueryRowContext(context.WithoutCancel(ctx), "SELECT RELEASE_LOCK(?)", name).Scan(&rel)
		if rerr == nil && rel.Int64 != 1 {
			rerr = fmt.Errorf("bench: RELEASE_LOCK returned %v", rel)
		}
		return true, errors.Join(err, rerr)
	}
}

// ---- gormlock.Transaction ----

type gormTx struct {
	*sqlBase
	gdb *gorm.DB
}

func openGormTransaction(_ context.Context, t Target, conns int) (Instance, error) {
	b, err := openSQLBase(t, conns)
	if err != nil {
		return nil, err
	}
	gdb, err := gormOn(t, b.db, false)
	if err != nil {
		b.Close()
		return nil, err
	}
	return gormTx{b, gdb}, nil
}

// Bind calls the verb on the *gorm.DB as is: the harness runs every attempt
// with context.Background(), which is GORM's default context, so a
// db.WithContext(ctx) per attempt would only add GORM's own allocations.
func (g gormTx) Bind(key string, crit func()) Attempt {
	fn := func(*gorm.DB) error { crit(); return nil }
	db := g.gdb
	return func(ctx context.Context) (bool, error) {
		return outcome(gormlock.Transaction(db, key, fn))
	}
}

// ---- gormlock.Session ----

type gormSession struct{ gormTx }

// Session pins a connection for the lock while fn may use the pool.
var openGormSession = sibling(openGormTransaction, 1, func(i gormTx) gormSession { return gormSession{i} })

func (g gormSession) Bind(key string, crit func()) Attempt {
	fn := func(context.Context) error { crit(); return nil }
	db := g.gdb
	return func(ctx context.Context) (bool, error) {
		return outcome(gormlock.Session(db, key, fn))
	}
}

// ---- plain GORM transaction, no lock (reference) ----

type gormNoLock struct{ gormTx }

var openGormNoLock = sibling(openGormTransaction, 0, func(i gormTx) gormNoLock { return gormNoLock{i} })

func (g gormNoLock) Bind(_ string, crit func()) Attempt {
	fn := func(*gorm.DB) error { crit(); return nil }
	db := g.gdb
	return func(ctx context.Context) (bool, error) {
		return true, db.Transaction(fn)
	}
}

// ---- entlock.Transaction ----

type entTx struct {
	*sqlBase
	client *ent.Client
}

func openEntTransaction(_ context.Context, t Target, conns int) (Instance, error) {
	b, err := openSQLBase(t, conns)
	if err != nil {
		return nil, err
	}
	drv := entlock.Wrap(entsql.OpenDB(string(t.Dialect), b.db))
	if err := drv.Err(); err != nil {
		b.Close()
		return nil, fmt.Errorf("bench: entlock.Wrap on %s: %w", t.Name, err)
	}
	return entTx{b, ent.NewClient(ent.Driver(drv))}, nil
}

func (e entTx) Bind(key string, crit func()) Attempt {
	fn := func(*ent.Tx) error { crit(); return nil }
	client := e.client
	return func(ctx context.Context) (bool, error) {
		return outcome(entlock.Transaction(ctx, client, key, fn))
	}
}

// ---- plain ent transaction, no lock (reference) ----

type entNoLock struct{ entTx }

var openEntNoLock = sibling(openEntTransaction, 0, func(i entTx) entNoLock { return entNoLock{i} })

// Bind is client.Tx and Commit with nothing in between: what the same ent
// stack costs without a lock.
func (e entNoLock) Bind(_ string, crit func()) Attempt {
	client := e.client
	return func(ctx context.Context) (bool, error) {
		tx, err := client.Tx(ctx)
		if err != nil {
			return false, err
		}
		crit()
		return true, tx.Commit()
	}
}
