package lockproto

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/keys"
)

// leaseMech is the lease (ormlock.WithLease; docs/PROTOCOL.md, Leases): a
// row of the lease table per key, inserted or taken over once expired by
// the server's clock, renewed while fn runs and expired by the release,
// each statement committed on its own, so that no connection is held
// between them. It is chosen by mechanismFor when the options ask for a
// lease; its SQL is one family's leaseSQL. A target's items are plain keys
// (resolve): a lease row is named by the namespace and the key's FenceID.
//
// The connection-level paths of the interface (a pinned Session hold,
// shared lock connections, session-level tries) have no lease form: a
// Session (leaseSession) and a Transaction (beginLocked) are the lease's
// own, and the rest refuse with errLeaseNoConn.
type leaseMech struct{ sql leaseSQL }

// leaseMechs are the lease mechanism of each dialect.
var leaseMechs = map[Dialect]Mechanism{Postgres: leaseMech{pgFencedLease{}}, MySQL: leaseMech{myLease{}}}

// ownSession is a Mechanism whose Session is its own protocol rather than
// a lock held on a pinned connection (Op.Session asks).
type ownSession interface {
	session(ctx context.Context, o *Op, db *sql.DB, fn func(ctx context.Context) error) error
}

// nestRefuser is a Mechanism that cannot take its lock inside the
// caller's open transaction (CheckNested asks).
type nestRefuser interface {
	refuseNested(o *Op, verb string) error
}

var (
	_ ownSession     = leaseMech{}
	_ nestRefuser    = leaseMech{}
	_ serverLockFree = leaseMech{}
)

// takesNoServerLock: a lease is a row, written on any node that takes
// writes (a Galera node; CockroachDB), where the server's own locks
// exclude nobody.
func (leaseMech) takesNoServerLock() {}

// errLeaseNoConn says that a lease is held by no connection, so a path
// that holds a lock on one does not apply.
var errLeaseNoConn = errors.New("ormlock: a lease is held by no connection: this path does not take leases")

func (leaseMech) Name() string       { return "lease" }
func (leaseMech) SharedMode() bool   { return true }
func (leaseMech) ServerWait() bool   { return false }
func (leaseMech) SessionLevel() bool { return false }
func (leaseMech) XactLevel() bool    { return false }
func (leaseMech) OneMessage() bool   { return false }

func (leaseMech) resolve(k keys.Key, _ string) lockItem { return plainItem(k) }

// compare: by the row's key (FenceID), byte for byte: the canonical
// order in which a set's rows are written, the same in every process.
func (leaseMech) compare(a, b lockItem) int {
	return strings.Compare(FenceID(a.key), FenceID(b.key))
}

func (leaseMech) serverName(it lockItem) string { return "lease row " + FenceID(it.key) }

func (leaseMech) local(it lockItem) localLock { return localLock{key: "lease:" + FenceID(it.key)} }

func (leaseMech) hold(context.Context, *Op, *sql.DB, pinned) (*sessionHold, error) {
	return nil, errLeaseNoConn
}

func (leaseMech) openShared(context.Context, *Op, *sharedConn) error { return errLeaseNoConn }

func (leaseMech) tryKey(context.Context, *Op, *sql.Conn) (bool, error) { return false, errLeaseNoConn }

func (leaseMech) unlockKey(context.Context, *Op, Querier) error { return errLeaseNoConn }

func (leaseMech) tryItem(context.Context, Querier, lockItem, *slotProbe) (bool, error) {
	return false, errLeaseNoConn
}

func (leaseMech) unlockItem(context.Context, Querier, lockItem) error { return errLeaseNoConn }

func (leaseMech) sharedToken(context.Context, *Op, *sql.DB, *sharedConn) error {
	return errLeaseNoConn
}

func (leaseMech) refuseNested(o *Op, verb string) error {
	return fmt.Errorf("%w: %s on %q with WithLease inside the caller's transaction: a lease is written and committed on its own, before fn's transaction, and its COMMIT is checked against the lease; call the verb outside the transaction",
		errs.ErrInvalidArgument, verb, o.Key.String())
}

// leaseOwner is the owner a lease row names when the options name none:
// "hostname/pid", as the ledger's.
var leaseOwner = sync.OnceValue(func() string {
	h, err := os.Hostname()
	if err != nil {
		h = "unknown"
	}
	return h + "/" + strconv.Itoa(os.Getpid())
})
