package entlock

import (
	"context"
	"database/sql"
	"fmt"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/lockproto"
)

// Driver is an ent dialect.Driver that can take ormlock's locks. It wraps the
// driver a client was built on; every operation ent itself performs (queries,
// client.Tx, client.BeginTx, migrations, Close) is passed to the wrapped
// driver unchanged. Only the verbs of this package ([Transaction], [Session],
// [RunOnce], ...) make it do something else. Build it with [Wrap].
//
// A Driver is safe for concurrent use, like the driver it wraps.
type Driver struct {
	drv  dialect.Driver
	db   *sql.DB
	dial lockproto.Dialect
	conn entsql.Conn // template for the Conn of a locked transaction
	cfg  config.Config
	err  error
}

var _ dialect.Driver = (*Driver)(nil)

// Wrap returns drv wrapped so that the verbs of this package can take locks
// through a client built on it; opts are the defaults of every verb called
// through it (per-call options apply on top). drv must be a PostgreSQL or
// MySQL/MariaDB driver that exposes its *sql.DB, such as an *entsql.Driver.
// Wrap never fails: when drv does not qualify or an option is invalid, plain
// use of the driver still works and every verb returns an error wrapping
// [ormlock.ErrUnsupportedDialect] or [ormlock.ErrInvalidArgument] without
// calling fn; check [Driver.Err] at start-up. See docs/PROTOCOL.md (Set-up).
func Wrap(drv dialect.Driver, opts ...ormlock.Option) *Driver {
	d := &Driver{drv: drv, cfg: config.New(opts...)}
	d.err = d.cfg.Err()
	if drv == nil {
		d.err = fmt.Errorf("%w: entlock.Wrap: nil driver", ormlock.ErrInvalidArgument)
		return d
	}
	name := drv.Dialect()
	dial, err := lockproto.DialectOf(name)
	if err != nil {
		if d.err == nil {
			d.err = fmt.Errorf("entlock.Wrap: %w", err)
		}
		return d
	}
	d.dial = dial
	d.db = sqlDBOf(drv)
	if d.db == nil {
		if d.err == nil {
			d.err = fmt.Errorf("%w: entlock.Wrap: driver %T does not expose its *sql.DB (wrap an *entsql.Driver from entsql.Open or entsql.OpenDB, or a driver with a DB() *sql.DB method)", ormlock.ErrUnsupportedDialect, drv)
		}
		return d
	}
	d.conn = entsql.OpenDB(name, d.db).Conn
	return d
}

// sqlDBOf finds the *sql.DB under an ent driver.
func sqlDBOf(drv dialect.Driver) *sql.DB {
	for {
		switch v := drv.(type) {
		case *entsql.Driver:
			// (*entsql.Driver).DB panics when the driver is not over a *sql.DB.
			db, _ := v.ExecQuerier.(*sql.DB)
			return db
		case *dialect.DebugDriver:
			drv = v.Driver
		case interface{ DB() *sql.DB }:
			return v.DB()
		default:
			return nil
		}
	}
}

// Err reports why the verbs cannot take locks through d: an invalid option
// (wrapping [ormlock.ErrInvalidArgument] or [ormlock.ErrInvalidKey]), or a
// driver that is nil, of another dialect or without a *sql.DB (wrapping
// [ormlock.ErrUnsupportedDialect] or ErrInvalidArgument). It is nil when d
// is usable.
func (d *Driver) Err() error { return d.err }

// DB returns the *sql.DB under the wrapped driver, or nil when there is none.
func (d *Driver) DB() *sql.DB { return d.db }

// Dialect returns the wrapped driver's dialect name.
func (d *Driver) Dialect() string {
	if d.drv == nil {
		return ""
	}
	return d.drv.Dialect()
}

// Exec passes the call to the wrapped driver.
func (d *Driver) Exec(ctx context.Context, query string, args, v any) error {
	if d.drv == nil {
		return d.err
	}
	return d.drv.Exec(ctx, query, args, v)
}

// Query passes the call to the wrapped driver.
func (d *Driver) Query(ctx context.Context, query string, args, v any) error {
	if d.drv == nil {
		return d.err
	}
	return d.drv.Query(ctx, query, args, v)
}

// ExecContext passes the call to the wrapped driver (used by clients
// generated with the sql/execquery feature).
func (d *Driver) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	ex, ok := d.drv.(interface {
		ExecContext(context.Context, string, ...any) (sql.Result, error)
	})
	if !ok {
		return nil, fmt.Errorf("ormlock: entlock: driver %T does not support ExecContext", d.drv)
	}
	return ex.ExecContext(ctx, query, args...)
}

// QueryContext passes the call to the wrapped driver (used by clients
// generated with the sql/execquery feature).
func (d *Driver) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	q, ok := d.drv.(interface {
		QueryContext(context.Context, string, ...any) (*sql.Rows, error)
	})
	if !ok {
		return nil, fmt.Errorf("ormlock: entlock: driver %T does not support QueryContext", d.drv)
	}
	return q.QueryContext(ctx, query, args...)
}

// Close closes the wrapped driver.
func (d *Driver) Close() error {
	if d.drv == nil {
		return nil
	}
	return d.drv.Close()
}

// Tx starts a transaction. Called by ent's client.Tx, it passes the call to
// the wrapped driver, unless the call comes from this package's verbs: then
// the transaction is the one fn gets, begun with the lock held.
func (d *Driver) Tx(ctx context.Context) (dialect.Tx, error) {
	if r := claim(ctx); r != nil {
		return d.serve(ctx, r, nil)
	}
	if d.drv == nil {
		return nil, d.err
	}
	return d.drv.Tx(ctx)
}

// BeginTx starts a transaction with options. Called by ent's client.BeginTx,
// it passes the call to the wrapped driver.
func (d *Driver) BeginTx(ctx context.Context, opts *sql.TxOptions) (dialect.Tx, error) {
	if r := claim(ctx); r != nil {
		return d.serve(ctx, r, opts)
	}
	b, ok := d.drv.(interface {
		BeginTx(context.Context, *sql.TxOptions) (dialect.Tx, error)
	})
	if !ok {
		if d.drv == nil {
			return nil, d.err
		}
		return nil, fmt.Errorf("ormlock: entlock: driver %T does not support BeginTx", d.drv)
	}
	return b.BeginTx(ctx, opts)
}

// serve answers a request of this package's verbs that reached d.
func (d *Driver) serve(ctx context.Context, r *request, opts *sql.TxOptions) (dialect.Tx, error) {
	r.drv = d
	switch {
	case r.probe:
		return nil, errProbe
	case r.work:
		tx := d.workTx(ctx, r, opts)
		r.tx = tx
		return tx, nil
	}
	t := &lockedTx{Conn: d.conn} // its transaction begins with the lock held (call.Locked)
	r.tx = t
	return t, nil
}

// lockedTx is the ent transaction of a verb: a transaction begun with the
// lock held, whose Commit and Rollback end the lock after the transaction
// (see lockproto.LockedTx). ent builds its transaction over it before the
// lock is taken; lt is set once it is (call.Locked), before fn runs.
type lockedTx struct {
	entsql.Conn // over the *sql.Tx: Exec, Query, ExecContext and QueryContext run in it
	lt          *lockproto.LockedTx
}

var _ dialect.Tx = (*lockedTx)(nil)

// Commit commits the transaction, then releases the lock.
func (t *lockedTx) Commit() error { return t.lt.Commit() }

// Rollback rolls the transaction back, then releases the lock.
func (t *lockedTx) Rollback() error { return t.lt.Rollback() }
