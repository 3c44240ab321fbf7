package lockproto

import (
	"context"
	"database/sql"
	"errors"
)

// Shared(k) as a lease (docs/PROTOCOL.md, Leases): every acquirer of k,
// shared or exclusive, writes k's one key row, so that two of them always
// conflict on one row (a row lock; on Galera, a certification conflict)
// and a reader and a writer can never both hold. A reader takes the key
// row when it expired, or joins it while it is shared (its expiry
// raised to the reader's, its readers counted up), and inserts a reader
// row of its own (reader = holder id) that it renews with the key row and
// deletes at its release, when it counts the key row's readers down: the
// last one expires it, so a writer need not wait for the TTL. A reader
// that dies leaves its count in the key row, which then expires at the
// TTL after the last renewal of any reader.

// acquireShared on PostgreSQL: one statement, the key row's upsert (taken
// when expired or shared) feeding the reader row's insert.
func (pgLease) acquireShared(ctx context.Context, db *sql.DB, q, f string, ttl int64, owner string, rows []leaseRow) error {
	const expired = "l.expires_at <= clock_timestamp()"
	query := `WITH k AS (
INSERT INTO ` + q + ` AS l (namespace, lock_key, reader, epoch, mode, owner, holder, acquired_at, expires_at, readers)
SELECT $4::text, $5::text, '', GREATEST(
	(SELECT h.epoch FROM ` + q + ` h WHERE h.namespace = $4::text AND h.lock_key = '' AND h.reader = ''),
	(SELECT t.token FROM ` + f + ` t WHERE t.namespace = $4::text AND t.lock_key = $5::text), 0) + 1,
	'shared', $2::text, '', clock_timestamp(), clock_timestamp() + $1::bigint * interval '1 microsecond', 1
WHERE ` + pgSyncLocal + `
ON CONFLICT (namespace, lock_key, reader) DO UPDATE
SET epoch = CASE WHEN ` + expired + ` THEN GREATEST(l.epoch + 1, EXCLUDED.epoch) ELSE l.epoch END,
	owner = EXCLUDED.owner, holder = '', mode = 'shared',
	acquired_at = CASE WHEN ` + expired + ` THEN clock_timestamp() ELSE l.acquired_at END,
	readers = CASE WHEN ` + expired + ` THEN 1 ELSE l.readers + 1 END,
	renewals = l.renewals + 1,
	expires_at = GREATEST(l.expires_at, EXCLUDED.expires_at)
WHERE ` + expired + ` OR l.mode = 'shared'
RETURNING l.epoch)
INSERT INTO ` + q + ` (namespace, lock_key, reader, epoch, mode, owner, holder, acquired_at, expires_at)
SELECT $4::text, $5::text, $3::text, k.epoch, 'shared', $2::text, $3::text, clock_timestamp(), clock_timestamp() + $1::bigint * interval '1 microsecond' FROM k
RETURNING epoch`
	var epoch int64
	err := db.QueryRowContext(ctx, query, ttl, owner, rows[1].holder, rows[0].ns, rows[0].key).Scan(&epoch)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err == nil {
		rows[0].epoch, rows[1].epoch = epoch, epoch
	}
	return err
}

func (pgLease) releaseShared(ctx context.Context, db Querier, q, ns, key, holder string, epoch int64) error {
	_, err := db.ExecContext(ctx, `WITH d AS (DELETE FROM `+q+` WHERE namespace = $1 AND lock_key = $2 AND reader = $3 AND holder = $3)
UPDATE `+q+` SET expires_at = CASE WHEN readers <= 1 THEN LEAST(expires_at, clock_timestamp()) ELSE expires_at END,
	readers = readers - 1, renewals = renewals + 1
WHERE namespace = $1 AND lock_key = $2 AND reader = '' AND mode = 'shared' AND epoch = $4`, ns, key, holder, epoch)
	return err
}

// acquireShared on MySQL/MariaDB: a short transaction, the key row's
// upsert (its epoch back as LastInsertId, 0 when an exclusive lease holds
// it), then the reader row's insert. Each assignment reads the columns
// the ones before it left, so the conditions come before what they test
// changes (mode, then expires_at, last).
func (myLease) acquireShared(ctx context.Context, db *sql.DB, q, f string, ttl int64, owner string, rows []leaseRow) error {
	const expired = "expires_at <= UTC_TIMESTAMP(6)"
	const taken = "(" + expired + " OR mode = 'shared')"
	key := "INSERT INTO " + q + ` (namespace, lock_key, reader, epoch, mode, owner, holder, acquired_at, expires_at, readers)
SELECT v.ns, v.k, '', LAST_INSERT_ID(GREATEST(
	COALESCE((SELECT h.epoch FROM ` + q + ` h WHERE h.namespace = v.ns AND h.lock_key = '' AND h.reader = ''), 0),
	COALESCE((SELECT t.token FROM ` + f + ` t WHERE t.namespace = v.ns AND t.lock_key = v.k), 0)) + 1),
	'shared', v.o, '', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL v.ttl MICROSECOND, 1
FROM (SELECT ? AS ns, CAST(? AS BINARY) AS k, ? AS o, ? AS ttl) AS v
ON DUPLICATE KEY UPDATE
	epoch = IF(` + expired + `, LAST_INSERT_ID(GREATEST(epoch + 1, VALUES(epoch))), IF(mode = 'shared', LAST_INSERT_ID(epoch), epoch + LAST_INSERT_ID(0))),
	owner = IF(` + taken + `, VALUES(owner), owner),
	acquired_at = IF(` + expired + `, UTC_TIMESTAMP(6), acquired_at),
	renewals = IF(` + taken + `, renewals + 1, renewals),
	readers = IF(` + expired + `, 1, IF(mode = 'shared', readers + 1, readers)),
	holder = IF(` + taken + `, '', holder),
	mode = IF(` + expired + `, 'shared', mode),
	expires_at = IF(` + taken + `, GREATEST(expires_at, VALUES(expires_at)), expires_at)`
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, key, rows[0].ns, []byte(rows[0].key), owner, ttl)
	var epoch int64
	if err == nil {
		epoch, err = res.LastInsertId()
	}
	if err == nil && epoch > 0 {
		_, err = tx.ExecContext(ctx, "INSERT INTO "+q+` (namespace, lock_key, reader, epoch, mode, owner, holder, acquired_at, expires_at)
VALUES (?, ?, ?, ?, 'shared', ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)`, rows[1].ns, []byte(rows[1].key), []byte(rows[1].holder), epoch, owner, []byte(rows[1].holder), ttl)
	}
	if err != nil || epoch == 0 {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	rows[0].epoch, rows[1].epoch = epoch, epoch
	return nil
}

func (myLease) releaseShared(ctx context.Context, db Querier, q, ns, key, holder string, epoch int64) error {
	if _, err := db.ExecContext(ctx, "DELETE FROM "+q+" WHERE namespace = ? AND lock_key = ? AND reader = ? AND holder = ?", ns, key, holder, holder); err != nil {
		return err
	}
	_, err := db.ExecContext(ctx, "UPDATE "+q+` SET expires_at = IF(readers <= 1, LEAST(expires_at, UTC_TIMESTAMP(6)), expires_at),
	readers = readers - 1, renewals = renewals + 1
WHERE namespace = ? AND lock_key = ? AND reader = '' AND mode = 'shared' AND epoch = ?`, ns, key, epoch)
	return err
}
