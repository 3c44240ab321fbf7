package lockproto

import (
	"context"
	"database/sql"
	"time"

	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/status"
)

// Who holds a lease. A lease is a row of the lease table, so its holder is
// what the row says (ormlock.HolderInfo, Leases): its epoch, mode, owner,
// when it was granted and when it expires, both by the server's clock. A
// row whose lease has expired is free. Holder and Holders read it for an
// Op whose mechanism is the lease; for one of the server's own locks
// (advisory, named), which is a different lock of the same key, they read
// the server's holder and then the key's live lease, so that an operator
// who asks for a key sees whichever holds it: Holder the lease when the
// server's lock is free, Holders both.
//
// The lease table may not exist (a Migrate from before leases, or a team
// that creates its tables itself): then nothing holds a lease. On
// PostgreSQL that is asked first (to_regclass, one more round trip), so
// that the caller's transaction, which a failed statement would abort, can
// go on; MySQL/MariaDB answer the look-up itself with "no such table",
// which leaves a transaction as it was.

// serverLocked is a mechanism whose locks are the server's own (pgAdvisory,
// mysqlNamed): lockServer is the server that names their holders. A
// mechanism that is not one is of rows, the lease, whose holders the lease
// table names.
type serverLocked interface {
	lockServer() lockServer
}

// lockServer reads the holders of a server's own locks and names them.
type lockServer interface {
	holderServer
	// lockLabel is HolderInfo.Mechanism of the server's locks.
	lockLabel() string
}

func (pgAdvisory) lockServer() lockServer { return postgresServer{} }
func (mysqlNamed) lockServer() lockServer { return mysqlServer{} }

func (postgresServer) lockLabel() string { return status.MechAdvisory }
func (mysqlServer) lockLabel() string    { return status.MechNamed }

// mechanismLabel is HolderInfo.Mechanism and Event.Mechanism of m's locks
// ("" for none: an Op without a target).
func mechanismLabel(m Mechanism) string {
	if s, ok := m.(serverLocked); ok {
		return s.lockServer().lockLabel()
	}
	if _, ok := m.(leaseMech); ok {
		return status.MechLease
	}
	return ""
}

// lookupHolder is LookupHolder by op's mechanism: the server's lock, then
// the key's live lease; or the lease only.
func lookupHolder(ctx context.Context, q Querier, op *Op) (HolderInfo, error) {
	if s, ok := op.target.mech.(serverLocked); ok {
		h, err := s.lockServer().holder(ctx, q, op)
		if err != nil || h.Held {
			return h, err
		}
		hs, err := leaseHolders(ctx, q, op, op.target.each()[0])
		if err != nil || len(hs) == 0 {
			return h, err
		}
		return hs[0], nil
	}
	hs, err := leaseHolders(ctx, q, op, op.target.each()[0])
	if err != nil || len(hs) == 0 {
		return freeLease(op), err
	}
	return hs[0], nil
}

// lookupHolders is LookupHolders' rows of item it by op's mechanism: the
// server's holders, then the lease's; or the lease's only.
func lookupHolders(ctx context.Context, q Querier, op *Op, it lockItem) ([]HolderInfo, error) {
	var hs []HolderInfo
	if s, ok := op.target.mech.(serverLocked); ok {
		var err error
		if hs, err = s.lockServer().holders(ctx, q, op, it); err != nil {
			return nil, err
		}
	}
	ls, err := leaseHolders(ctx, q, op, it)
	return append(hs, ls...), err
}

// freeLease is the answer for a lease nobody holds.
func freeLease(op *Op) HolderInfo {
	return HolderInfo{Dialect: op.Dialect.String(), Lock: leaseLockName(op.Cfg.LeaseTableName(), FenceID(op.target.each()[0].key)), Mechanism: status.MechLease}
}

// leaseLockName is a lease's HolderInfo.Lock: its table and row.
func leaseLockName(table, key string) string { return table + " lock_key=" + key }

// leaseHolderSQL is the holder look-up's SQL on one family of servers.
type leaseHolderSQL interface {
	// existsSQL asks whether the table exists (its one argument: the
	// quoted name), or is "" where the look-up's own error says so.
	existsSQL() string
	// holdersSQL reads the live rows of one key (namespace, lock_key):
	// reader, epoch, mode, owner, microseconds since acquired_at and until
	// expires_at, by the server's clock.
	holdersSQL(q string) string
	// keyArg is a lock_key as an argument.
	keyArg(key string) any
}

func (pgLease) existsSQL() string { return "SELECT to_regclass($1) IS NOT NULL" }

func (pgLease) holdersSQL(q string) string {
	return `SELECT reader, epoch, mode, owner,
	(extract(epoch FROM clock_timestamp() - acquired_at) * 1000000)::int8,
	(extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::int8
FROM ` + q + ` WHERE namespace = $1 AND lock_key = $2 AND expires_at > clock_timestamp() ORDER BY reader`
}

func (pgLease) keyArg(key string) any { return key }

func (myLease) existsSQL() string { return "" }

func (myLease) holdersSQL(q string) string {
	return `SELECT reader, epoch, mode, owner,
	TIMESTAMPDIFF(MICROSECOND, acquired_at, UTC_TIMESTAMP(6)),
	TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)
FROM ` + q + ` WHERE namespace = ? AND lock_key = ? AND expires_at > UTC_TIMESTAMP(6) ORDER BY reader`
}

func (myLease) keyArg(key string) any { return []byte(key) }

// leaseHolders reads the live lease of item it of op's lock: its shared
// holders (a row each) when it has readers, else its one holder; none
// when it is free or the table does not exist.
func leaseHolders(ctx context.Context, q Querier, op *Op, it lockItem) ([]HolderInfo, error) {
	t, err := NewLeaseTable(op.Dialect, op.Cfg.LeaseTableName())
	if err != nil {
		return nil, err
	}
	ls := PerServer[leaseHolderSQL](t.s, pgLease{}, myLease{})
	if e := ls.existsSQL(); e != "" {
		var ok bool
		if err := q.QueryRowContext(ctx, e, t.q).Scan(&ok); err != nil {
			return nil, errs.Wrap(err, "lease table %q: look it up", t.name)
		}
		if !ok {
			return nil, nil
		}
	}
	rq, ok := q.(interface {
		QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	})
	if !ok {
		return nil, nil
	}
	key := FenceID(it.key)
	rows, err := rq.QueryContext(ctx, ls.holdersSQL(t.q), op.Cfg.Namespace, ls.keyArg(key))
	if err != nil {
		// no table, or (MySQL/MariaDB) no database selected, where GET_LOCK
		// names still work but no table can be read: no lease
		if t.s.MissingTable(err) || MySQLErrno(err) == 1046 {
			return nil, nil
		}
		return nil, errs.Wrap(err, "lease table %q: look up the lease of %s", t.name, key)
	}
	defer rows.Close()
	var own HolderInfo
	var readers []HolderInfo
	for rows.Next() {
		var reader string
		var since, left int64
		h := HolderInfo{Held: true, Dialect: op.Dialect.String(), Mechanism: status.MechLease, Lock: leaseLockName(t.name, key)}
		if err := rows.Scan(&reader, &h.Epoch, &h.Mode, &h.Owner, &since, &left); err != nil {
			return nil, errs.Wrap(err, "lease table %q: read the lease of %s", t.name, key)
		}
		h.HeldFor = nonNegative(time.Duration(since) * time.Microsecond)
		h.ExpiresIn = nonNegative(time.Duration(left) * time.Microsecond)
		h.Shared = h.Mode == LeaseModeShared
		if reader == "" {
			own = h
			continue
		}
		h.Lock += " reader=" + reader
		readers = append(readers, h)
	}
	if err := rows.Err(); err != nil {
		return nil, errs.Wrap(err, "lease table %q: read the lease of %s", t.name, key)
	}
	if len(readers) > 0 {
		return readers, nil
	}
	if own.Held {
		return []HolderInfo{own}, nil
	}
	return nil, nil
}
