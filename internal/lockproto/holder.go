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
)

// HolderInfo is who holds a lock, as [LookupHolder] reads it: the fields of
// ormlock.HolderInfo, whose documentation says what each means per
// dialect; an adapter converts it (ormlock.HolderInfo(h)).
type HolderInfo struct {
	Held        bool
	Dialect     string
	Lock        string
	PID         int64
	User        string
	Application string
	Owner       string
	ClientAddr  string
	Database    string
	State       string
	StateFor    time.Duration
	Query       string
	Mode        string
	TxStart     time.Time
	ConnStart   time.Time
	HeldFor     time.Duration
	Waiters     int
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
const pgHolderQuery = `
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
ORDER BY l.granted DESC, l.pid
LIMIT 1`

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
	switch op.Dialect {
	case Postgres:
		return pgHolder(ctx, q, op.target.pg)
	case MySQL:
		h, err := mysqlHolder(ctx, q, op.target.mysql)
		if err == nil && h.Held {
			h.Owner, err = op.mysqlOwner(ctx, q, h.PID)
		}
		return h, err
	}
	return HolderInfo{}, fmt.Errorf("%w: dialect %d", errs.ErrUnsupportedDialect, op.Dialect)
}

func pgHolder(ctx context.Context, q Querier, k keys.PostgresKey) (HolderInfo, error) {
	classid, objid, objsubid := PGLockTag(k)
	h := HolderInfo{
		Dialect: Postgres.String(),
		Lock:    "classid=" + strconv.FormatUint(uint64(classid), 10) + " objid=" + strconv.FormatUint(uint64(objid), 10) + " objsubid=" + strconv.Itoa(objsubid),
	}
	var (
		granted                              bool
		backendStart, xactStart, stateChange sql.NullTime
		now                                  time.Time
		waiters                              int64
	)
	err := q.QueryRowContext(ctx, pgHolderQuery, int64(classid), int64(objid), objsubid).Scan(
		&granted, &h.PID, &h.Mode, &h.User, &h.Application, &h.ClientAddr, &h.Database, &h.State, &h.Query,
		&backendStart, &xactStart, &stateChange, &now, &waiters)
	if errors.Is(err, sql.ErrNoRows) {
		return HolderInfo{Dialect: h.Dialect, Lock: h.Lock}, nil
	}
	if err != nil {
		return HolderInfo{}, errs.Wrap(err, "look up lock holder in pg_locks")
	}
	h.Waiters = int(waiters)
	if !granted { // only waiters: free this instant
		return HolderInfo{Dialect: h.Dialect, Lock: h.Lock, Waiters: h.Waiters}, nil
	}
	h.Held = true
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
	return h, nil
}

func mysqlHolder(ctx context.Context, q Querier, name string) (HolderInfo, error) {
	h := HolderInfo{Dialect: MySQL.String(), Lock: name}
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
