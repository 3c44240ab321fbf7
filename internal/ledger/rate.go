package ledger

import (
	"context"
	"database/sql"
	"time"

	"github.com/ormlock/ormlock/internal/config"

	"github.com/ormlock/ormlock/internal/lockproto"
)

// createRate creates the rate limits' token table (ormlock.Rate,
// ormlock.WithRateTable) on q, under Migrate's lock, beside the ledger
// and fence tables: an empty table costs nothing, and a Transaction of a
// Rate then never finds it missing.
func createRate(ctx context.Context, q lockproto.Querier, op *lockproto.Op) error {
	t, err := lockproto.NewRateTable(op.Dialect, op.Cfg.RateTable)
	if err != nil {
		return err
	}
	return t.Create(ctx, q)
}

// RateTableSQL returns the statements that create cfg's rate table on
// dialect d's servers, as Migrate runs them (for teams that run their own
// migrations, and for ormlock.MigrateSQL).
func RateTableSQL(d lockproto.Dialect, name string) ([]string, error) {
	t, err := lockproto.NewRateTable(d, name)
	if err != nil {
		return nil, err
	}
	return t.CreateSQL(), nil
}

// PruneRate deletes the token rows of cfg's rate table that have been free
// for more than olderThan (lockproto.RateTable.Prune): Prune's second step,
// in every namespace (a rate key's row names its namespace only through
// keys.MySQL's form, and deleting a free token is always safe).
func PruneRate(ctx context.Context, d lockproto.Dialect, db *sql.DB, cfg config.Config, olderThan time.Duration) (int64, error) {
	t, err := lockproto.NewRateTable(d, cfg.RateTable)
	if err != nil {
		return 0, err
	}
	return t.Prune(ctx, db, olderThan, PruneBatch)
}

// PruneLease deletes the lease rows of cfg's lease table expired for more
// than olderThan (lockproto.LeaseTable.Prune): Prune's third step, in
// every namespace; each key's epoch survives in its fencing counter.
func PruneLease(ctx context.Context, d lockproto.Dialect, db *sql.DB, cfg config.Config, olderThan time.Duration) (int64, error) {
	t, err := lockproto.NewLeaseTable(d, cfg.LeaseTableName())
	if err != nil {
		return 0, err
	}
	return t.Prune(ctx, db, olderThan, PruneBatch)
}
