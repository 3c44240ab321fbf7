package gormlock

import (
	"fmt"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/ledger"
)

// AdvanceFences adds by to every fencing counter of the namespace in
// effect and returns how many it moved. Call it once after promoting an
// asynchronous replica (or a MySQL replica without semi-synchronous
// replication), which may lack the last tokens the old primary issued:
// every token issued afterwards is greater than those, as long as by
// exceeds the tokens issued per key in the replication lag (a generous
// margin such as 1,000,000 costs nothing). by is in 1..2^52. db must not
// be inside a transaction. The command is ormlock fence advance --by N.
// See docs/PROTOCOL.md (Failover).
func AdvanceFences(db *gorm.DB, by int64, opts ...ormlock.Option) (int64, error) {
	const verb = "gormlock.AdvanceFences"
	argErr := ledger.CheckAdvance(verb, by)
	if argErr == nil && db != nil && inTx(db) {
		argErr = fmt.Errorf("%w: %s: db is inside a transaction; the counters are moved in a transaction of their own", ormlock.ErrInvalidArgument, verb)
	}
	d, cfg, err := open(db, verb, opts, argErr)
	if err != nil {
		return 0, err
	}
	sqlDB, err := primarySQL(db)
	if err != nil {
		return 0, err
	}
	return ledger.AdvanceFences(ctxOf(db), sqlDB, d, verb, by, cfg)
}
