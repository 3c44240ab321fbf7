package ledger

import (
	"context"
	"database/sql"
	"time"

	"github.com/ormlock/ormlock/internal/lockproto"
)

// ResignReader is a Lead's view of its key's 'lead' row of the controls
// table (lockproto.ResignReader): built once per Lead, it reads through
// db, the primary's pool, never the lock's own connection, so a missing
// table cannot abort the lock's transaction.
type ResignReader struct {
	db  *sql.DB
	rs  resignServer
	t   *Table
	ns  string
	key string
}

var _ lockproto.ResignReader = (*ResignReader)(nil)

// NewResignReader returns the reader of op's key's resigns on db, in op's
// namespace and beside op's ledger table; nil (no poll) when the ledger
// table's name leaves no room for a controls table, which then never
// exists.
func NewResignReader(db *sql.DB, op *lockproto.Op) *ResignReader {
	t, err := NewTable(op.Dialect, op.Cfg.LedgerTable)
	if err != nil || t.cq == "" {
		return nil
	}
	return &ResignReader{
		db:  db,
		rs:  lockproto.PerServer[resignServer](t.s, pgResign{}, myResign{}),
		t:   t,
		ns:  op.Cfg.Namespace,
		key: op.Key.String(),
	}
}

// Probe reports whether the controls table exists, with the server's
// clock: one catalog read, which never fails for a missing table (so the
// server logs no error at every term of a ledger Migrate has not
// upgraded).
func (r *ResignReader) Probe(ctx context.Context) (time.Time, bool, error) {
	query, arg := r.rs.clockProbeSQL(r.t)
	var n int
	now := r.rs.timeDest()
	if err := r.db.QueryRowContext(ctx, query, arg).Scan(&n, now); err != nil {
		return time.Time{}, false, CtlOf(r.t).wrapCtl("look for the controls table", err)
	}
	t, err := r.rs.scanTime(now)
	return t, n > 0, err
}

// Asked reads the key's resign, if one was ever asked.
func (r *ResignReader) Asked(ctx context.Context) (lockproto.ResignAsk, bool, error) {
	var a lockproto.ResignAsk
	var ms int64
	at := r.rs.timeDest()
	err := r.db.QueryRowContext(ctx, r.rs.readSQL(r.t), r.ns, r.key).Scan(at, &a.Owner, &ms, &a.Author, &a.Reason)
	switch {
	case err == sql.ErrNoRows:
		return a, false, nil
	case err != nil:
		return a, false, CtlOf(r.t).wrapCtl("read the leader's row", err)
	}
	a.Cooldown = time.Duration(ms) * time.Millisecond
	a.At, err = r.rs.scanTime(at)
	return a, err == nil, err
}
