package ledger

import (
	"context"
	"database/sql"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/lockproto"
)

// The operators' controls (docs/OPERATIONS.md): a table beside the ledger,
// <ledger>_controls, one row per paused (or scheduled) job, and the
// actions log, <ledger>_actions. Migrate creates both (and widens the
// ledger's status CHECK to 'skipped' and 'rerun').
//
// The claim reads the job's pause flag in its own statement (claim.go):
// no round trip is added for a job that is not paused. A ledger whose
// controls table does not exist (Migrate has not run since the upgrade)
// claims as before: whether it exists is asked once per pool and table,
// and asked again at most once a minute while it is missing (ControlsOn).

// Ctl is the operators' side of a ledger table: its controls table and
// actions log (the methods are here, not on Table, which has enough).
type Ctl struct{ t *Table }

// CtlOf returns t's operators' side.
func CtlOf(t *Table) Ctl { return Ctl{t} }

// ReprobeControls is how long a pool remembers that a ledger has no
// controls table before it looks again.
const ReprobeControls = time.Minute

// ctlKey names a ledger table on a pool.
type ctlKey struct {
	db    weak.Pointer[sql.DB]
	table string
}

// ctlState is what a pool knows of a ledger's controls table: present,
// or missing when it was last looked for (unix nanoseconds; 0: never).
type ctlState struct {
	present atomic.Bool
	checked atomic.Int64
}

var ctlStates sync.Map // ctlKey -> *ctlState

func ctlStateOf(key *sql.DB, table string) *ctlState {
	k := ctlKey{db: lockproto.WeakOf(key), table: table}
	if v, ok := ctlStates.Load(k); ok {
		return v.(*ctlState)
	}
	v, loaded := ctlStates.LoadOrStore(k, new(ctlState))
	if !loaded { // forgotten with the pool, as lockproto's caches are
		runtime.AddCleanup(key, func(k ctlKey) { ctlStates.Delete(k) }, k)
	}
	return v.(*ctlState)
}

// ControlsOn reports whether t's controls table exists, as known on the
// pool key (the *sql.DB under which the protocol caches what it learns
// of a server): when it was last found missing more than ReprobeControls
// ago, or never looked for, q is asked. An error of that question counts
// as missing, unremembered: the call claims as before.
func (c Ctl) ControlsOn(ctx context.Context, key *sql.DB, q lockproto.Querier) bool {
	t := c.t
	if t.cq == "" || q == nil {
		return false
	}
	var st *ctlState
	if key != nil {
		st = ctlStateOf(key, t.name)
		if st.present.Load() {
			return true
		}
		if c := st.checked.Load(); c != 0 && time.Since(time.Unix(0, c)) < ReprobeControls {
			return false
		}
	}
	query, arg := t.ctl.probeSQL(t)
	var n int
	if err := q.QueryRowContext(ctx, query, arg).Scan(&n); err != nil {
		return false
	}
	if st != nil {
		st.present.Store(n > 0)
		st.checked.Store(time.Now().UnixNano())
	}
	return n > 0
}

// MarkControls records that the ledger table named table has its
// controls table on the pool key (Migrate created it).
func MarkControls(key *sql.DB, table string) {
	if key != nil {
		ctlStateOf(key, table).present.Store(true)
	}
}

// noControls is the error of an action on a ledger whose controls table
// or actions log cannot exist (its name is too long) or does not.
func (c Ctl) noControls(verb string) error {
	t := c.t
	return errs.Mark(errs.ErrInvalidArgument, nil, "%s: the ledger table %q has no controls table and actions log: their names (%q, %q) would pass 63 bytes; use a shorter ledger table name (ormlock.WithLedgerTable)",
		verb, t.name, t.name+"_controls", t.name+"_actions")
}

// wrapCtl annotates a statement's error on the controls table or the
// actions log, with a hint when either is missing.
func (c Ctl) wrapCtl(what string, err error) error {
	t := c.t
	if t.s.MissingTable(err) {
		return errs.Wrap(err, "the controls table or actions log of ledger table %q does not exist (create them with Migrate): %s", t.name, what)
	}
	return errs.Wrap(err, "ledger table %q: %s", t.name, what)
}
