package lockproto

import (
	"context"
	"database/sql"
)

// beginSplitTx begins fn's transaction of the split protocol (beginSplit):
// db.BeginTx, or Op.SplitTx when the adapter needs a hold of the
// transaction's connection (pgxlock hands fn a pgx.Tx on it). A
// transaction that must be given up after a successful begin is rolled
// back by the caller through TxConn.Rollback.
func (o *Op) beginSplitTx(ctx context.Context, db *sql.DB, opts *sql.TxOptions) (TxConn, error) {
	if o.SplitTx != nil {
		return o.SplitTx(ctx, db, opts)
	}
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return tx, nil
}

// dropSplitTx gives up a transaction of Op.SplitTx that database/sql is
// rolling back already (its context ended as BEGIN returned), so that the
// adapter frees what it holds with it (a pinned connection).
func (o *Op) dropSplitTx(tx TxConn) {
	if o.SplitTx != nil && tx != nil {
		_ = tx.Rollback()
	}
}
