package errs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// RolledBack returns the error of a transaction helper whose fn failed with
// err and whose rollback then returned rerr, as ent's WithTx does: err
// itself when the rollback succeeded, found the transaction already ended
// (sql.ErrTxDone: fn ended it), or failed after ctx ended (the transaction
// went with its connection); otherwise err with the rollback's failure
// added, both reachable with errors.Is and errors.As, fn's error first.
// Every adapter's Transaction and RunOnce end a failed fn through it.
func RolledBack(ctx context.Context, err, rerr error) error {
	if rerr == nil || errors.Is(rerr, sql.ErrTxDone) || ctx.Err() != nil {
		return err
	}
	return fmt.Errorf("%w (%srollback failed: %w)", err, Prefix, unprefixed(rerr))
}

// unprefixed returns err, whose text loses a leading "ormlock: " when it
// has one, still reachable with errors.Is and errors.As.
func unprefixed(err error) error {
	if msg := err.Error(); Trim(msg) != msg {
		return trimmed{err}
	}
	return err
}

// trimmed is an error whose text is its wrapped error's without the prefix.
type trimmed struct{ err error }

func (t trimmed) Error() string { return Trim(t.err.Error()) }
func (t trimmed) Unwrap() error { return t.err }
