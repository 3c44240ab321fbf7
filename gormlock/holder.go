package gormlock

import (
	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/lockproto"
)

// Holder asks the database who holds the lock named by key: the answer to
// "why didn't my job run?" when a verb returned [ormlock.ErrNotAcquired]. The
// key is resolved as the verbs resolve it (the plugin's or the call's
// namespace); the context is GORM's (db.WithContext). A free lock is
// HolderInfo.Held false with a nil error. The answer is a snapshot, and
// inside one PostgreSQL transaction it stays that of the first lookup. See
// docs/PROTOCOL.md (Holder) and [ormlock.HolderInfo] for each field.
func Holder[K ormlock.KeyType](db *gorm.DB, key K, opts ...ormlock.Option) (ormlock.HolderInfo, error) {
	c, err := prepare(db, "Holder", keys.Of[ormlock.Key](key), opts, false)
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
	h, err := lockproto.LookupHolder(c.ctx, q, c.op)
	return ormlock.HolderInfo(h), err
}
