package lockproto

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/schema"
)

// Fencing tokens (ormlock.WithFencing; docs/PROTOCOL.md, Fencing).
//
// The token of an acquisition is drawn from a counter row of the fence
// table, one row per (namespace, fence id), by a write that commits on its
// own once the lock is held and before fn runs:
//
//   - MySQL/MariaDB: on the lock's pinned connection between GET_LOCK and
//     BEGIN (or, for a Session, after GET_LOCK), autocommitted: INSERT ...
//     VALUES (..., LAST_INSERT_ID(1)) ON DUPLICATE KEY UPDATE token =
//     LAST_INSERT_ID(token + 1); the driver returns the token as the
//     result's LastInsertId, so it is one round trip.
//   - PostgreSQL: the lock lives in a transaction that stays open while fn
//     runs (fn's own, or the lock transaction of Session and the split
//     protocol), so the token is committed on another connection of the
//     pool: INSERT ... ON CONFLICT DO UPDATE SET token = token + 1 RETURNING
//     token, autocommitted. The write gives the statement's transaction an
//     xid, so its COMMIT waits for the WAL flush; synchronous_commit is
//     raised to local for that transaction when the session has it off.
//     A bare nextval() would not do: its WAL record may not be flushed
//     before a crash unless a transaction with an xid commits after it.
//
// A counter row is only written by a holder of the lock of its key, so the
// row lock the UPDATE takes never waits for long; tokens only grow, so a
// token lost to a crash or a cancelled statement is only a gap.

// FenceTableSuffix is appended to the ledger table's name to name the fence
// table.
const FenceTableSuffix = schema.FenceSuffix

// FenceTable is the fence table of one dialect.
type FenceTable struct {
	s    Server
	name string
	q    string
	read fenceReads
}

// NewFenceTable returns the fence table that goes with the ledger table
// ledger: its name with FenceTableSuffix, which must be a plain identifier
// (errs.ErrInvalidArgument otherwise).
func NewFenceTable(d Dialect, ledger string) (*FenceTable, error) {
	name := ledger + FenceTableSuffix
	if err := config.ValidIdentifier("fence table name (the ledger table's name + \""+FenceTableSuffix+"\")", name); err != nil {
		return nil, err
	}
	s, err := ServerOf(d)
	if err != nil {
		return nil, err
	}
	q := s.Quote(name)
	return &FenceTable{s: s, name: name, q: q, read: s.fenceReads(q)}, nil
}

// Name returns the table's (unquoted) name.
func (t *FenceTable) Name() string { return t.name }

// CreateSQL returns the CREATE TABLE IF NOT EXISTS statement. The fence id
// is at most keys.MaxNameLen bytes plus a short prefix; on MySQL it is
// VARBINARY, compared byte for byte (no collation, no PAD SPACE).
func (t *FenceTable) CreateSQL() string { return t.s.fenceCreateSQL(t.q) }

// Create runs CreateSQL on q.
func (t *FenceTable) Create(ctx context.Context, q Querier) error {
	if _, err := q.ExecContext(ctx, t.CreateSQL()); err != nil {
		return errs.Wrap(err, "create fence table %q", t.name)
	}
	return nil
}

// Holder is what the issuance of a token checks or needs of the lock it is
// issued under.
type Holder struct {
	// PostgreSQL: the pid of the backend that holds the lock, and the lock.
	PID uint32
	Key keys.PostgresKey
	// MySQL/MariaDB: the lock connection runs with autocommit off, so the
	// INSERT is followed by COMMIT.
	Commit bool
}

// pgLockTag returns k as pg_locks shows it: classid, objid, objsubid.
func pgLockTag(k keys.PostgresKey) (classid, objid int64, objsubid int) {
	if k.IsPair {
		return int64(uint32(k.ClassID)), int64(uint32(k.ObjID)), 2
	}
	return int64(uint64(k.Int64) >> 32), int64(uint32(k.Int64)), 1
}

// errNotHeld says that the issuing statement found the lock no longer held
// by the lock's backend: no token was drawn.
var errNotHeld = errors.New("the lock's backend no longer holds the lock")

// Issue draws the next token of (ns, id), committed on q (a pinned
// connection outside any transaction, or the pool) when it returns. On
// PostgreSQL the statement draws it only while h.PID holds h.Key (an error
// wrapping errs.ErrLockLost otherwise); on MySQL/MariaDB q is the lock's
// own connection, and h.Commit sends COMMIT after the INSERT.
func (t *FenceTable) Issue(ctx context.Context, q Querier, ns, id string, h Holder) (int64, error) {
	return t.s.issueToken(ctx, t, q, ns, id, h)
}

func (t *FenceTable) wrap(err error) error {
	if t.s.MissingTable(err) {
		return errs.Wrap(err, "fence table %q does not exist (create it with Migrate): issue a fencing token", t.name)
	}
	return errs.Wrap(err, "fence table %q: issue a fencing token", t.name)
}

// Advance adds by to every counter of namespace ns, committed on q (the
// pool, autocommitted) when it returns, and returns how many counters it
// moved. It is the remedy after promoting an asynchronous replica, which
// may lack the last tokens the old primary issued: every token issued
// after it is greater than any of those, as long as by exceeds the tokens
// per counter issued in the replication lag (docs/PROTOCOL.md, Failover).
// A counter being issued waits for the UPDATE's row lock, and one created
// after it starts from 1 as before: Advance moves the counters that exist.
func (t *FenceTable) Advance(ctx context.Context, q Querier, ns string, by int64) (int64, error) {
	res, err := q.ExecContext(ctx, t.s.fenceAdvanceSQL(t.q), by, ns)
	if err != nil {
		if t.s.MissingTable(err) {
			return 0, errs.Wrap(err, "fence table %q does not exist (create it with Migrate): advance the fencing counters", t.name)
		}
		return 0, errs.Wrap(err, "fence table %q: advance the fencing counters by %d", t.name, by)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, errs.Wrap(err, "fence table %q: advance the fencing counters", t.name)
	}
	return n, nil
}

// FenceID is the counter row's identity of key k (the namespace is a
// column of its own): "name:" and the name, "id:42", "pair:1,2". A name
// and an ID or pair never share a row, whatever lock name they map to.
func FenceID(k keys.Key) string {
	if keys.IsName(keys.Key(k)) {
		return "name:" + keys.NameValue(keys.Key(k))
	}
	return k.String()
}

// JobFenceID is the counter of a RunOnce job: all slots of a job share it,
// so tokens grow across slots too, and the table keeps one row per job
// rather than one per slot.
func JobFenceID(job string) string { return "job:" + job }

// fencing is what an Op's fencing keeps: the counter its tokens count on,
// the token of its acquisition, and the backend that took the lock.
type fencing struct {
	id    string // the fencing counter, when not the key's (FenceID)
	token int64  // the fencing token of this acquisition, once issued
	// pid: PostgreSQL with fencing, the pid of the backend that took the
	// lock, which the token's issuance checks still holds it
	pid uint32
}

// SetFenceID makes o's tokens count on the counter id (JobFenceID, for
// RunOnce) instead of its key's.
func SetFenceID(o *Op, id string) { o.fence.id = id }

// Fencing reports whether o issues fencing tokens.
func (o *Op) Fencing() bool { return o.Cfg.Fencing }

// checkFencePool refuses fencing on PostgreSQL with a pool of one
// connection: the token is committed on a second connection while the
// lock's transaction stays open on the first.
func checkFencePool(o *Op, db *sql.DB) error {
	if !o.Cfg.Fencing || !o.Dialect.server().tokenOnPool() || db.Stats().MaxOpenConnections != 1 {
		return nil
	}
	return fmt.Errorf("%w: %s on %q with WithFencing on PostgreSQL needs two connections (the lock's transaction stays open on one while the token is committed on another, so that it is durable before fn runs), and the pool's MaxOpenConns is 1",
		errs.ErrInvalidArgument, o.Verb, o.Key.String())
}

// CheckFence refuses, before anything is taken, a fenced call that cannot
// work: an invalid fence table name, or a PostgreSQL pool of one connection.
func CheckFence(o *Op, db *sql.DB) error {
	if !o.Cfg.Fencing {
		return nil
	}
	if _, err := NewFenceTable(o.Dialect, o.Cfg.LedgerTable); err != nil {
		return err
	}
	return checkFencePool(o, db)
}

// IssueToken draws o's token once the lock is held (a no-op without
// WithFencing): q is the lock's pinned connection outside any transaction
// on MySQL/MariaDB, the pool on PostgreSQL. ctx bounds it. On failure the
// caller releases the lock; the error says what failed (the context's
// error included when ctx ended it).
func IssueToken(ctx context.Context, o *Op, q Querier) error {
	if !o.Cfg.Fencing {
		return nil
	}
	t, err := NewFenceTable(o.Dialect, o.Cfg.LedgerTable)
	if err != nil {
		return err
	}
	id := o.fence.id
	if id == "" {
		id = FenceID(o.Key)
	}
	h, err := t.s.tokenHolder(o)
	if err != nil {
		return err
	}
	tok, err := t.Issue(ctx, q, o.Cfg.Namespace, id, h)
	if err != nil {
		if errors.Is(err, errs.ErrLockLost) {
			o.Emit(ctx, config.EventLockLost, err)
		}
		if cerr := ctxErr(ctx); cerr != nil {
			err = errs.Join(cerr, err)
		}
		return errs.Wrap(err, "%s on %q", o.Verb, o.Key.String())
	}
	o.fence.token = tok
	return nil
}

// sessionToken issues a Session's token once its lock is held: on the lock
// connection on MySQL/MariaDB (autocommitted; no transaction is open on it),
// on the pool on PostgreSQL (the lock transaction stays open). On failure
// the lock is released and conn given back, or destroyed when the release
// failed.
func sessionToken(ctx context.Context, o *Op, db *sql.DB, conn pinned, h *sessionHold) error {
	if !o.Cfg.Fencing {
		return nil
	}
	var q Querier = db
	if !o.Dialect.server().tokenOnPool() {
		q = conn.sqlConn()
	}
	err := IssueToken(ctx, o, q)
	if err == nil {
		return nil
	}
	rerr := releaseWithin(ctx, h.release)
	if rerr != nil {
		conn.destroy()
		o.Emit(ctx, config.EventReleaseFailed, rerr)
		return errs.Join(err, rerr)
	}
	conn.giveBack()
	o.Emit(ctx, config.EventReleased, nil)
	return err
}

// AutocommitOff reports whether the lock's MySQL/MariaDB connection runs
// with autocommit 0 (read by GET_LOCK's statement; false on PostgreSQL and
// before the lock): the claim mode's ledger statements are then followed
// by COMMIT.
func AutocommitOff(o *Op) bool { return o.Acquired() && o.Dialect.server().autocommitOff(o) }
