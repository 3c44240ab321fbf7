package gormlock

import (
	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/lockproto"
)

// Holder asks the database who holds the lock named by key: the answer to
// "why didn't my job run?" when Transaction or Session returned
// [ormlock.ErrNotAcquired]. The key is resolved exactly as the verbs resolve
// it, with the plugin's namespace and per-call options
// ([ormlock.WithNamespace]); other options are ignored. The context is
// GORM's (db.WithContext).
//
// A free lock is reported as HolderInfo.Held false with a nil error. A held
// one names the holder's connection: on PostgreSQL its backend pid, user,
// application_name, client address, state, last query and transaction start
// (pg_locks joined with pg_stat_activity); on MySQL/MariaDB its connection
// id, user, host, command, state and statement (IS_USED_LOCK joined with
// information_schema.PROCESSLIST). See [ormlock.HolderInfo] for each field
// and for what needs privileges.
//
// The lookup runs on a source (primary) connection when
// gorm.io/plugin/dbresolver is registered, or on db's transaction when db is
// in one. It is a snapshot: the holder may be gone by the time it returns.
// Inside one PostgreSQL transaction, pg_stat_activity is read once and kept
// until the transaction ends, so repeated lookups there show the holders'
// activity as of the first; call it outside a transaction to poll.
func Holder[K ormlock.KeyType](db *gorm.DB, key K, opts ...ormlock.Option) (ormlock.HolderInfo, error) {
	c, err := prepare(db, "Holder", keys.Of(key), opts)
	if err != nil {
		return ormlock.HolderInfo{}, err
	}
	var q lockproto.Querier
	if inTx(c.db) {
		q, err = sqlTx(c.db)
	} else {
		q, err = primarySQL(c.db)
	}
	if err != nil {
		return ormlock.HolderInfo{}, err
	}
	return lockproto.LookupHolder(c.ctx, q, c.op)
}
