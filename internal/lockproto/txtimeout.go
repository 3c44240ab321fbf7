package lockproto

import (
	"context"

	"github.com/ormlock/ormlock/internal/errs"
)

// pgKeepTransaction is sent at the start of a Session's lock transaction.
// PostgreSQL 17's transaction_timeout ends any transaction older than it,
// idle or not, with FATAL, and so would end the lock transaction, which is
// meant to live as long as fn runs. Setting it to 0 for this transaction only
// (set_config(..., true) is SET LOCAL) takes effect at once: the server stops
// the transaction's timer. The WHERE clause keeps servers before 17, which
// do not know the setting (current_setting(..., true) is NULL), from being
// asked to set it, and skips the set when it is already 0. One round trip,
// sent by the simple protocol (no arguments).
const pgKeepTransaction = `SELECT set_config('transaction_timeout', '0', true) WHERE current_setting('transaction_timeout', true) <> '0'`

// PGKeepTransaction disables transaction_timeout (PostgreSQL 17+) for the
// open transaction q, so that a long, deliberately idle lock transaction is
// not ended by it; it does nothing on servers without the setting.
func PGKeepTransaction(ctx context.Context, q Querier) error {
	if _, err := q.ExecContext(ctx, pgKeepTransaction); err != nil {
		return errs.Wrap(err, "disable transaction_timeout for the lock transaction")
	}
	return nil
}
