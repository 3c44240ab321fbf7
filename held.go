package ormlock

import (
	"context"
	"errors"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
)

// Held reports whether ctx is the context a verb handed to fn (or one
// derived from it) and that verb's lock is held now: ShedLock's
// LockAssert.assertLocked, for code that must only run under the lock.
//
// It is true while fn runs with the lock held, and false for a context no
// verb made, before the lock is taken, once the verb's use has ended (fn
// returned and the verb returned), and from the moment a Session, a Lead
// term or a claim-mode run learns its lock is lost (the context then ends
// with cause [ErrLockLost]). Nested verbs answer for the innermost lock.
// A Lead's fn context answers for its own term: false once that term is
// deposed, even when a later term is elected.
//
// fn's context is: Session's, Lead's and the sqllock and pgxlock verbs'
// ctx; gormlock's tx.Statement.Context (tx.Statement.Context is what
// db.WithContext set); entlock's entlock.Context(tx) (entlock.Held(tx)).
// It costs a context look-up and two atomic loads.
func Held(ctx context.Context) bool {
	l := config.LockOf(ctx)
	if l == nil || !l.HeldNow() {
		return false
	}
	return !errors.Is(context.Cause(ctx), errs.ErrLockLost) // lost: said before the loss's event
}
