package lockproto

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/fencectx"
	"github.com/ormlock/ormlock/internal/keys"
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
const FenceTableSuffix = "_fence"

// FenceTable is the fence table of one dialect.
type FenceTable struct {
	d    Dialect
	name string
	q    string
}

// NewFenceTable returns the fence table that goes with the ledger table
// ledger: its name with FenceTableSuffix, which must be a plain identifier
// (ormlock.ErrInvalidArgument otherwise).
func NewFenceTable(d Dialect, ledger string) (*FenceTable, error) {
	name := ledger + FenceTableSuffix
	if err := config.ValidIdentifier(ormlock.ErrInvalidArgument, "fence table name (the ledger table's name + \""+FenceTableSuffix+"\")", name); err != nil {
		return nil, err
	}
	t := &FenceTable{d: d, name: name}
	switch d {
	case Postgres:
		t.q = `"` + name + `"`
	case MySQL:
		t.q = "`" + name + "`"
	default:
		return nil, fmt.Errorf("%w: dialect %d", ormlock.ErrUnsupportedDialect, d)
	}
	return t, nil
}

// Name returns the table's (unquoted) name.
func (t *FenceTable) Name() string { return t.name }

// CreateSQL returns the CREATE TABLE IF NOT EXISTS statement. The fence id
// is at most keys.MaxNameLen bytes plus a short prefix; on MySQL it is
// VARBINARY, compared byte for byte (no collation, no PAD SPACE).
func (t *FenceTable) CreateSQL() string {
	if t.d == Postgres {
		return `CREATE TABLE IF NOT EXISTS ` + t.q + ` (
	namespace varchar(128) NOT NULL DEFAULT '',
	lock_key  text         NOT NULL,
	token     bigint       NOT NULL,
	PRIMARY KEY (namespace, lock_key)
)`
	}
	return "CREATE TABLE IF NOT EXISTS " + t.q + ` (
	namespace VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
	lock_key  VARBINARY(1100) NOT NULL,
	token     BIGINT NOT NULL,
	PRIMARY KEY (namespace, lock_key)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`
}

// Create runs CreateSQL on q.
func (t *FenceTable) Create(ctx context.Context, q Querier) error {
	if _, err := q.ExecContext(ctx, t.CreateSQL()); err != nil {
		return errs.Wrap(err, "create fence table %q", t.name)
	}
	return nil
}

func (t *FenceTable) issueSQL() string {
	if t.d == Postgres {
		// set_config is evaluated for the proposed row, before the
		// conflict check, and returns the (non-NULL) new value: the
		// literal 1 of a new row
		return `INSERT INTO ` + t.q + ` AS f (namespace, lock_key, token)
VALUES ($1, $2, (set_config('synchronous_commit', CASE current_setting('synchronous_commit') WHEN 'off' THEN 'local' ELSE current_setting('synchronous_commit') END, true) IS NOT NULL)::int)
ON CONFLICT (namespace, lock_key) DO UPDATE SET token = f.token + 1
RETURNING f.token`
	}
	return "INSERT INTO " + t.q + " (namespace, lock_key, token) VALUES (?, ?, LAST_INSERT_ID(1)) ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(token + 1)"
}

// Issue draws the next token of (ns, id), autocommitted on q (a pinned
// connection outside any transaction, or the pool).
func (t *FenceTable) Issue(ctx context.Context, q Querier, ns, id string) (int64, error) {
	var tok int64
	if t.d == Postgres {
		if err := q.QueryRowContext(ctx, t.issueSQL(), ns, id).Scan(&tok); err != nil {
			return 0, t.wrap(err)
		}
		return tok, nil
	}
	res, err := q.ExecContext(ctx, t.issueSQL(), ns, []byte(id))
	if err != nil {
		return 0, t.wrap(err)
	}
	if tok, err = res.LastInsertId(); err != nil {
		return 0, t.wrap(err)
	}
	if tok <= 0 {
		return 0, t.wrap(fmt.Errorf("LAST_INSERT_ID returned %d", tok))
	}
	return tok, nil
}

func (t *FenceTable) wrap(err error) error {
	if SQLState(err) == "42P01" || MySQLErrno(err) == 1146 {
		return errs.Wrap(err, "fence table %q does not exist (create it with Migrate): issue a fencing token", t.name)
	}
	return errs.Wrap(err, "fence table %q: issue a fencing token", t.name)
}

// FenceID is the counter row's identity of key k (the namespace is a
// column of its own): "name:" and the name, "id:42", "pair:1,2". A name
// and an ID or pair never share a row, whatever lock name they map to.
func FenceID(k ormlock.Key) string {
	if keys.IsName(k) {
		return "name:" + keys.NameValue(k)
	}
	return k.String()
}

// JobFenceID is the counter of a RunOnce job: all slots of a job share it,
// so tokens grow across slots too, and the table keeps one row per job
// rather than one per slot.
func JobFenceID(job string) string { return "job:" + job }

// SetFenceID makes o's tokens count on the counter id (JobFenceID, for
// RunOnce) instead of its key's.
func (o *Op) SetFenceID(id string) { o.fenceID = id }

// Token returns the fencing token of o's acquisition, once issued.
func (o *Op) Token() (int64, bool) { return o.token, o.token > 0 }

// Fencing reports whether o issues fencing tokens.
func (o *Op) Fencing() bool { return o.Cfg.Fencing }

// checkFencePool refuses fencing on PostgreSQL with a pool of one
// connection: the token is committed on a second connection while the
// lock's transaction stays open on the first.
func (o *Op) checkFencePool(db *sql.DB) error {
	if !o.Cfg.Fencing || o.Dialect != Postgres || db.Stats().MaxOpenConnections != 1 {
		return nil
	}
	return fmt.Errorf("%w: %s on %q with WithFencing on PostgreSQL needs two connections (the lock's transaction stays open on one while the token is committed on another, so that it is durable before fn runs), and the pool's MaxOpenConns is 1",
		ormlock.ErrInvalidArgument, o.Verb, o.Key.String())
}

// CheckFence refuses, before anything is taken, a fenced call that cannot
// work: an invalid fence table name, or a PostgreSQL pool of one connection.
func (o *Op) CheckFence(db *sql.DB) error {
	if !o.Cfg.Fencing {
		return nil
	}
	if _, err := NewFenceTable(o.Dialect, o.Cfg.LedgerTable); err != nil {
		return err
	}
	return o.checkFencePool(db)
}

// IssueToken draws o's token once the lock is held (a no-op without
// WithFencing): q is the lock's pinned connection outside any transaction
// on MySQL/MariaDB, the pool on PostgreSQL. ctx bounds it. On failure the
// caller releases the lock; the error says what failed (the context's
// error included when ctx ended it).
func (o *Op) IssueToken(ctx context.Context, q Querier) error {
	if !o.Cfg.Fencing {
		return nil
	}
	t, err := NewFenceTable(o.Dialect, o.Cfg.LedgerTable)
	if err != nil {
		return err
	}
	id := o.fenceID
	if id == "" {
		id = FenceID(o.Key)
	}
	tok, err := t.Issue(ctx, q, o.Cfg.Namespace, id)
	if err != nil {
		if cerr := ctxErr(ctx); cerr != nil {
			err = errs.Join(cerr, err)
		}
		return errs.Wrap(err, "%s on %q", o.Verb, o.Key.String())
	}
	o.token = tok
	return nil
}

// tokenContext returns ctx carrying o's token, when one was issued.
func (o *Op) tokenContext(ctx context.Context) context.Context {
	if tok, ok := o.Token(); ok {
		return fencectx.With(ctx, tok)
	}
	return ctx
}

// TokenContext is tokenContext for the adapters: ctx carrying o's token
// (ormlock.FencingToken reads it), or ctx itself without one.
func (o *Op) TokenContext(ctx context.Context) context.Context { return o.tokenContext(ctx) }

// sessionToken issues a Session's token once its lock is held: on the lock
// connection on MySQL/MariaDB (autocommitted; no transaction is open on it),
// on the pool on PostgreSQL (the lock transaction stays open). On failure
// the lock is released and conn given back, or destroyed when the release
// failed.
func (o *Op) sessionToken(ctx context.Context, db *sql.DB, conn *sql.Conn, h *sessionHold) error {
	if !o.Cfg.Fencing {
		return nil
	}
	var q Querier = conn
	if o.Dialect == Postgres {
		q = db
	}
	err := o.IssueToken(ctx, q)
	if err == nil {
		return nil
	}
	rerr := releaseWithin(ctx, h.release)
	if rerr != nil {
		Destroy(conn)
		o.Emit(ctx, ormlock.EventReleaseFailed, rerr)
		return errs.Join(err, rerr)
	}
	_ = conn.Close()
	o.Emit(ctx, ormlock.EventReleased, nil)
	return err
}
