package lockproto

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/status"
)

// HolderInfo is who holds a lock, as [LookupHolder] reads it: defined once
// in internal/status, ormlock.HolderInfo is the same type.
type HolderInfo = status.HolderInfo

// HolderType is the constraint of ormlock.HolderInfo: the one type.
type HolderType interface{ HolderInfo }

// HoldersAs returns hs as H values (ormlock.HolderInfo), with err.
func HoldersAs[H HolderType](hs []HolderInfo, err error) ([]H, error) {
	if hs == nil {
		return nil, err
	}
	out := make([]H, len(hs))
	for i, h := range hs {
		out[i] = H(h)
	}
	return out, err
}

// PGLockTag returns the pg_locks coordinates of an advisory lock key, as
// PostgreSQL stores them (SET_LOCKTAG_INT64 / SET_LOCKTAG_INT32 in its
// lockfuncs.c): a bigint key is classid = its high 32 bits, objid = its low
// 32 bits, objsubid = 1; a pair is classid = the first int, objid = the
// second, objsubid = 2. classid and objid are oid columns, so the int32
// halves read as unsigned.
func PGLockTag(k keys.PostgresKey) (classid, objid uint32, objsubid int) {
	if k.IsPair {
		return uint32(k.ClassID), uint32(k.ObjID), 2
	}
	return uint32(uint64(k.Int64) >> 32), uint32(k.Int64), 1
}

// pgHolderQuery finds the granted holder of one advisory lock in the current
// database (the lowest pid if several hold it shared) and counts the
// sessions queued for it, in one statement. statement_timestamp() is the
// server's clock, so durations are free of client clock skew.
const pgHolderQuery = pgLocksOf + `ORDER BY l.granted DESC, l.pid
LIMIT 1`

// pgLocksOf selects the pg_locks rows of one advisory lock (classid $1,
// objid $2, objsubid $3) in the current database, with their
// pg_stat_activity and the count of waiters.
const pgLocksOf = `
SELECT l.granted, coalesce(l.pid, 0)::int8, l.mode,
       coalesce(a.usename::text, ''), coalesce(a.application_name, ''),
       coalesce(host(a.client_addr) || ':' || a.client_port, ''),
       coalesce(a.datname::text, ''), coalesce(a.state, ''), coalesce(a.query, ''),
       a.backend_start, a.xact_start, a.state_change, statement_timestamp(),
       count(*) FILTER (WHERE NOT l.granted) OVER ()
FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory'
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.classid::int8 = $1 AND l.objid::int8 = $2 AND l.objsubid = $3
`

// mysqlHolderQuery resolves the named lock's holder and its PROCESSLIST row
// in one statement, so the holder cannot go away between the two.
const mysqlHolderQuery = `
SELECT l.id, p.USER, p.HOST, p.DB, p.COMMAND, p.TIME, p.STATE, p.INFO
FROM (SELECT IS_USED_LOCK(?) AS id) AS l
LEFT JOIN information_schema.PROCESSLIST AS p ON p.ID = l.id`

// LookupHolder asks the server who holds op's lock (the key as op resolved
// it, namespace included, exactly as the verbs lock it). q must reach the
// primary that the locks are taken on; any connection, pool or transaction
// there will do. A free lock is Held false with a nil error. See
// HolderInfo for what each field means per dialect.
//
// It is the protocol behind gormlock.HolderInfo and entlock.HolderInfo: build the Op
// with NewOp(d, "HolderInfo", key, cfg).
func LookupHolder(ctx context.Context, q Querier, op *Op) (HolderInfo, error) {
	if op == nil {
		return HolderInfo{}, fmt.Errorf("%w: lockproto.LookupHolder: nil Op", errs.ErrInvalidArgument)
	}
	if _, err := ServerOf(op.Dialect); err != nil {
		return HolderInfo{}, err
	}
	return lookupHolder(ctx, q, op)
}

// holderServer is Holder's and Holders' queries on one server.
type holderServer interface {
	// holder reads the holder of op's lock (LookupHolder).
	holder(ctx context.Context, q Querier, op *Op) (HolderInfo, error)
	// holders reads every holder of it, an item of op's lock (LookupHolders).
	holders(ctx context.Context, q Querier, op *Op, it lockItem) ([]HolderInfo, error)
}

func (postgresServer) holder(ctx context.Context, q Querier, op *Op) (HolderInfo, error) {
	return pgHolder(ctx, q, op.target.pg)
}

func (postgresServer) holders(ctx context.Context, q Querier, _ *Op, it lockItem) ([]HolderInfo, error) {
	return pgHolders(ctx, q, it.pg)
}

func (mysqlServer) holder(ctx context.Context, q Querier, op *Op) (HolderInfo, error) {
	h, err := mysqlHolder(ctx, q, op.target.mysql)
	if err == nil && h.Held {
		h.Owner, err = mysqlOwner(ctx, op, q, h.PID)
	}
	return h, err
}

func (mysqlServer) holders(ctx context.Context, q Querier, op *Op, it lockItem) ([]HolderInfo, error) {
	h, err := mysqlHolder(ctx, q, it.mysql)
	if err != nil || !h.Held {
		return nil, err
	}
	h.Owner, err = mysqlOwnerOf(ctx, op, q, it.mysql, h.PID)
	return []HolderInfo{h}, err
}

func pgHolder(ctx context.Context, q Querier, k keys.PostgresKey) (HolderInfo, error) {
	classid, objid, objsubid := PGLockTag(k)
	h := HolderInfo{Dialect: postgresServer{}.Name(), Lock: pgLockName(k), Mechanism: status.MechAdvisory}
	var waiters int
	row := q.QueryRowContext(ctx, pgHolderQuery, int64(classid), int64(objid), objsubid)
	granted, err := scanPGHolder(row.Scan, &h, &waiters)
	if errors.Is(err, sql.ErrNoRows) {
		return HolderInfo{Dialect: h.Dialect, Lock: h.Lock, Mechanism: h.Mechanism}, nil
	}
	if err != nil {
		return HolderInfo{}, errs.Wrap(err, "look up lock holder in pg_locks")
	}
	if !granted { // only waiters: free this instant
		return HolderInfo{Dialect: h.Dialect, Lock: h.Lock, Mechanism: h.Mechanism, Waiters: waiters}, nil
	}
	return h, nil
}

// pgLockName is the Lock of a HolderInfo for k: its pg_locks coordinates.
func pgLockName(k keys.PostgresKey) string {
	classid, objid, objsubid := PGLockTag(k)
	return "classid=" + strconv.FormatUint(uint64(classid), 10) + " objid=" + strconv.FormatUint(uint64(objid), 10) + " objsubid=" + strconv.Itoa(objsubid)
}

// scanPGHolder reads one row of pgHolderQuery (or pgHoldersQuery) into h,
// whose Dialect and Lock are set, and the count of waiters; it returns
// whether the row is a granted holder.
func scanPGHolder(scan func(dest ...any) error, h *HolderInfo, waiters *int) (bool, error) {
	var (
		granted                              bool
		backendStart, xactStart, stateChange sql.NullTime
		now                                  time.Time
		n                                    int64
	)
	if err := scan(&granted, &h.PID, &h.Mode, &h.User, &h.Application, &h.ClientAddr, &h.Database, &h.State, &h.Query,
		&backendStart, &xactStart, &stateChange, &now, &n); err != nil {
		return false, err
	}
	*waiters = int(n)
	h.Waiters = int(n)
	if !granted {
		return false, nil
	}
	h.Held = true
	h.Shared = h.Mode == "ShareLock"
	h.Owner = h.Application
	if backendStart.Valid {
		h.ConnStart = backendStart.Time
	}
	if xactStart.Valid {
		h.TxStart = xactStart.Time
		var changed time.Time
		if stateChange.Valid {
			changed = stateChange.Time
		}
		since, _ := pgHeldSince(h.State, h.Query, xactStart.Time, changed)
		h.HeldFor = nonNegative(now.Sub(since))
	} else if backendStart.Valid {
		h.HeldFor = nonNegative(now.Sub(backendStart.Time))
	}
	if stateChange.Valid {
		h.StateFor = nonNegative(now.Sub(stateChange.Time))
	}
	return true, nil
}

func mysqlHolder(ctx context.Context, q Querier, name string) (HolderInfo, error) {
	h := HolderInfo{Dialect: mysqlServer{}.Name(), Lock: name, Mechanism: status.MechNamed}
	var (
		id                                   sql.NullInt64
		user, host, db, command, state, info sql.NullString
		secs                                 sql.NullInt64
	)
	err := q.QueryRowContext(ctx, mysqlHolderQuery, name).Scan(&id, &user, &host, &db, &command, &secs, &state, &info)
	if err != nil {
		return HolderInfo{}, errs.Wrap(err, "look up lock holder with IS_USED_LOCK")
	}
	if !id.Valid {
		return h, nil
	}
	h.Held = true
	h.PID = id.Int64
	h.User, h.ClientAddr, h.Database, h.Query = user.String, host.String, db.String, info.String
	h.State = command.String
	if state.String != "" {
		h.State += " (" + state.String + ")"
	}
	h.StateFor = time.Duration(secs.Int64) * time.Second
	return h, nil
}

func nonNegative(d time.Duration) time.Duration {
	if d < 0 {
		return 0
	}
	return d
}

// pgHoldersQuery is pgHolderQuery for every granted holder of the lock
// (share-mode holders are several), waiters counted on each row.
const pgHoldersQuery = pgLocksOf + `ORDER BY l.pid`

// LookupHolders asks the server for every holder of op's lock, whatever
// its shape: each holder of one key (several when they hold it shared),
// of each key of a set, of each slot of a semaphore, a HolderInfo each
// naming its key (Key), mode (Shared) and slot (Slot, 1 to n; 0 when not a
// semaphore's). A lock nobody holds has no row.
func LookupHolders(ctx context.Context, q Querier, op *Op) ([]HolderInfo, error) {
	if op == nil {
		return nil, fmt.Errorf("%w: lockproto.LookupHolders: nil Op", errs.ErrInvalidArgument)
	}
	t := op.target
	var out []HolderInfo
	for i, it := range t.each() {
		name, slot := it.key.String(), 0
		if t.anyOne() { // a semaphore's slots
			name, slot = keys.Plain(t.key).String(), i+1
		}
		hs, err := lookupHolders(ctx, q, op, it)
		if err != nil {
			return nil, err
		}
		for _, h := range hs {
			h.Key, h.Slot = name, slot
			out = append(out, h)
		}
	}
	return out, nil
}

// pgHolders reads every granted holder of k.
func pgHolders(ctx context.Context, q Querier, k keys.PostgresKey) ([]HolderInfo, error) {
	rq, ok := q.(interface {
		QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	})
	if !ok {
		h, err := pgHolder(ctx, q, k)
		if err != nil || !h.Held {
			return nil, err
		}
		return []HolderInfo{h}, nil
	}
	classid, objid, objsubid := PGLockTag(k)
	rows, err := rq.QueryContext(ctx, pgHoldersQuery, int64(classid), int64(objid), objsubid)
	if err != nil {
		return nil, errs.Wrap(err, "look up lock holders in pg_locks")
	}
	defer rows.Close()
	var out []HolderInfo
	for rows.Next() {
		h := HolderInfo{Dialect: postgresServer{}.Name(), Lock: pgLockName(k), Mechanism: status.MechAdvisory}
		var waiters int
		granted, err := scanPGHolder(rows.Scan, &h, &waiters)
		if err != nil {
			return nil, errs.Wrap(err, "look up lock holders in pg_locks")
		}
		if granted {
			out = append(out, h)
		}
	}
	return out, errs.Wrap(rows.Err(), "look up lock holders in pg_locks")
}
