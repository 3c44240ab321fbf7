package lockproto

import (
	"context"

	"github.com/ormlock/ormlock/internal/errs"
)

// A lease's epochs and the key's fencing counter are one sequence: a
// grant raises the key's row of the fence table to its epoch (never
// lowers it), committed on its own before fn runs, and a grant's epoch is
// drawn above that row (acquireSQL). So an advisory acquisition fenced
// with WithFencing draws its token above every epoch of the key, and a
// lease above every advisory token: a fleet moving from advisory locks to
// leases through the dual-lock phase hands out tokens that only grow
// (docs/MIGRATING.md); and a lease row deleted by hand does not restart
// its key's epochs, which start above the counter again.

// raiseFenceSQL is the statement that raises (namespace, lock_key)'s
// counter to an epoch, on each family: $1 namespace, $2 key, $3 epoch.
// On PostgreSQL it commits with at least synchronous_commit = local, as
// the grant did.
func raiseFenceSQL(s Server, f string) string {
	return PerServer(s,
		`INSERT INTO `+f+` AS f (namespace, lock_key, token) SELECT $1, $2, $3::bigint WHERE `+pgSyncLocal+`
ON CONFLICT (namespace, lock_key) DO UPDATE SET token = EXCLUDED.token WHERE f.token < EXCLUDED.token`,
		"INSERT INTO "+f+` (namespace, lock_key, token) VALUES (?, ?, ?)
ON DUPLICATE KEY UPDATE token = GREATEST(token, VALUES(token))`)
}

// pgFencedLease is PostgreSQL's lease whose grant raises the fencing
// counters in its own statement (a data-modifying WITH around pgLease's
// upsert, in the grant's transaction): no round trip of its own.
type pgFencedLease struct{ pgLease }

func (s pgFencedLease) acquireSQL(q, f string, n int) string {
	return `WITH g AS (` + s.pgLease.acquireSQL(q, f, n) + `),
r AS (INSERT INTO ` + f + ` AS f (namespace, lock_key, token) SELECT g.namespace, g.lock_key, g.epoch FROM g
	ON CONFLICT (namespace, lock_key) DO UPDATE SET token = EXCLUDED.token WHERE f.token < EXCLUDED.token)
SELECT namespace, lock_key, epoch FROM g`
}

// raisesFence says acquireSQL raises the counters itself.
func (pgFencedLease) raisesFence() bool { return true }

// raiseFence raises the fencing counter of each key just granted to its
// epoch, one autocommitted statement per key, unless the grant's own
// statement did (pgFencedLease; a shared lease's statement does not).
func (h *leaseHeld) raiseFence(ctx context.Context, rows []leaseRow) error {
	if r, ok := h.m.sql.(interface{ raisesFence() bool }); ok && r.raisesFence() && !h.shared {
		return nil
	}
	s := h.o.Dialect.server()
	q := raiseFenceSQL(s, h.fence)
	for i, r := range rows {
		if i > 0 && rows[i-1].ns == r.ns && rows[i-1].key == r.key {
			continue // a shared lease's reader row: its key row's epoch
		}
		key := PerServer[any](s, r.key, []byte(r.key))
		if _, err := h.db.ExecContext(ctx, q, r.ns, key, r.epoch); err != nil {
			return errs.Wrap(err, "fence table %s: raise the counter of %q to its lease's epoch %d", h.fence, h.o.Key.String(), r.epoch)
		}
	}
	return nil
}
