// Act's resign (ormlock.ActionResign): ask the leader of a key to step
// down.

package verbs

import (
	"context"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/ledger"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/status"
)

// Resign is Act for a resign: the precedence's steps for the Holder
// lookup of a.Key (ledger.CheckResign is step 3), then ledger.Resign on
// the primary's pool, which refuses a key nobody holds. A handle inside
// the caller's transaction is refused: the action commits its own.
func Resign[B Binder](ctx context.Context, b B, pkg string, a status.Action, opts []config.Option) (status.ActionRecord, error) {
	verb := pkg + ".Act"
	p, op, err := Prepare(ctx, b, pkg, "Act", a.Key, opts, Args{Err: ledger.CheckResign(verb, a)}, false, lockproto.HeldForHolder)
	defer p.release()
	if err == nil {
		err = p.ownTx("Act", "an action commits a transaction of its own")
	}
	if err != nil {
		return status.ActionRecord{}, p.mend(err)
	}
	r, err := ledger.Resign(ctx, p.sqlDB(), op, verb, a)
	return r, p.mend(err)
}
