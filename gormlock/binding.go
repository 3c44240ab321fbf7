package gormlock

import (
	"context"
	"fmt"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/verbs"
)

const pkg = "gormlock"

// binder is gormlock's binding of the verb core: behind a *gorm.DB stand
// its error (db.Error), its dialector's dialect, the plugin's defaults (or
// its failed registration), the primary's *sql.DB (dbresolver's source),
// and, when db is inside db.Transaction, the caller's transaction, where
// the server check and the reads run. The context is GORM's
// (db.WithContext).
type binder struct{ db *gorm.DB }

func (b binder) Nil() string { return verbs.NilIf(b.db == nil, "*gorm.DB") }

func (b binder) Bind(_ context.Context, verb string, opts []config.Option) (verbs.Pool, error) {
	db := b.db
	if db.Error != nil {
		return verbs.Pool{}, db.Error
	}
	d, err := dialectOf(db)
	if err != nil {
		return verbs.Pool{}, err
	}
	cfg, err := configFor(db, opts)
	if err != nil {
		return verbs.Pool{}, err
	}
	p := verbs.Pool{Pkg: pkg, Dialect: d, Cfg: cfg, NeedSQLTx: prepared(db)}
	p.DB, err = primarySQL(db)
	if inTx(db) {
		q, err := sqlTx(db)
		if err != nil {
			return verbs.Pool{}, err
		}
		tx, ok := q.(interface {
			lockproto.Querier
			lockproto.CheckQuerier
		})
		if !ok {
			return verbs.Pool{}, fmt.Errorf("ormlock: GORM transaction pool %T cannot run queries", q)
		}
		p.Tx = tx
		// the server check runs in the caller's transaction; without the
		// primary's pool it is skipped (the transaction's pool was checked
		// when it began)
		p.NoCheck = p.DB == nil
		return p, nil
	}
	if err != nil {
		return verbs.Pool{}, err
	}
	return p, nil
}

// dialectOf is db's dialect, told by its dialector's name.
func dialectOf(db *gorm.DB) (lockproto.Dialect, error) {
	if db.Dialector == nil {
		return 0, fmt.Errorf("%w: *gorm.DB has no dialector", ormlock.ErrUnsupportedDialect)
	}
	return lockproto.DialectOf(db.Dialector.Name())
}

// configFor returns the plugin's defaults (if registered) with opts on top,
// or the error of a failed registration on db (see Plugin.Initialize).
func configFor(db *gorm.DB, opts []ormlock.Option) (config.Config, error) {
	if db.Config != nil {
		if f, ok := db.Config.Plugins[failedName].(*failed); ok {
			return config.Config{}, f.err
		}
		if p, ok := db.Config.Plugins[PluginName].(*Plugin); ok {
			return p.cfg.With(opts...), nil
		}
	}
	return config.New(opts...), nil
}
