package lockproto

import (
	"strconv"
	"strings"
)

// The renewal statement of each family finds its rows by the lease
// table's primary key (namespace, lock_key, reader), whatever their
// number: 290-590 ms per 1,024 rows at 10,000 leases before, when
// PostgreSQL resolved a row-constructor IN list by a scan.

// renewSQL on PostgreSQL: $1 ttl in microseconds, then the leases as five
// arrays (namespace, lock_key, reader, epoch, holder), unnested, sorted
// by key, and each row looked up and locked by a LATERAL subquery on the
// primary key (an index scan per lease, never a scan of the table), so
// the rows are locked in key order before any is written, and the
// statement's text is one for any number of leases (n unused). Its wait for a row lock is bounded by the server
// (lock_timeout, a quarter of the TTL, set for the statement's own
// transaction before any row is locked), below the client's timeout of
// the renewal (a third of the TTL): a blocked renewal fails with the
// server's lock timeout instead of being cancelled by the client, whose
// cancel request (pgx's, when a statement's context ends) crashes
// PgBouncer before 1.19.1 ("bad client state").
func (pgLease) renewSQL(q string, _ int) string {
	return `UPDATE ` + q + ` AS l SET expires_at = GREATEST(l.expires_at, clock_timestamp() + $1::bigint * interval '1 microsecond'), renewals = l.renewals + 1
FROM (SELECT t.namespace, t.lock_key, t.reader
	FROM (SELECT * FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[]) AS u(ns, k, r, e, h) ORDER BY ns, k, r) AS v
	CROSS JOIN LATERAL (SELECT namespace, lock_key, reader FROM ` + q + `
		WHERE set_config('lock_timeout', ($1::bigint / 4000)::text, true) IS NOT NULL
		AND namespace = v.ns AND lock_key = v.k AND reader = v.r AND epoch = v.e AND holder = v.h AND expires_at > clock_timestamp()
		FOR UPDATE) AS t) AS c
WHERE l.namespace = c.namespace AND l.lock_key = c.lock_key AND l.reader = c.reader`
}

// renewArgs on PostgreSQL: the ttl, then each column as an array literal
// (text, which every driver sends as it is, cast by the statement).
func (pgLease) renewArgs(ttl int64, rs []leaseRow) (int, []any) {
	var cols [5][]string
	for _, r := range rs {
		cols[0] = append(cols[0], r.ns)
		cols[1] = append(cols[1], r.key)
		cols[2] = append(cols[2], r.reader)
		cols[3] = append(cols[3], strconv.FormatInt(r.epoch, 10))
		cols[4] = append(cols[4], r.holder)
	}
	args := []any{ttl}
	for _, c := range cols {
		args = append(args, pgArrayLiteral(c))
	}
	return len(rs), args
}

// pgArrayLiteral is PostgreSQL's text form of an array of ss, each
// element quoted ("", backslash and double quote escaped).
func pgArrayLiteral(ss []string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, s := range ss {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for _, c := range []byte(s) {
			if c == '"' || c == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(c)
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// renewSQL on MySQL/MariaDB: a row-constructor IN list of n full primary
// keys (with epoch and holder), which InnoDB resolves by the primary key;
// rows updated in key order.
func (s myLease) renewSQL(q string, n int) string {
	return "UPDATE " + q + ` SET expires_at = GREATEST(expires_at, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND), renewals = renewals + 1
WHERE (namespace, lock_key, reader, epoch, holder) IN (` + tuples(s, n, 5, 0) + `) AND expires_at > UTC_TIMESTAMP(6)
ORDER BY namespace, lock_key, reader`
}

// renewArgs on MySQL/MariaDB: the ttl, then the tuples, padded to a
// power of two with the last one again (a row matches once however often
// it is named), so that a pool's statement cache holds a few texts, not
// one per number of leases.
func (myLease) renewArgs(ttl int64, rs []leaseRow) (int, []any) {
	args := []any{ttl}
	for _, r := range rs {
		args = append(args, r.ns, r.key, r.reader, r.epoch, r.holder)
	}
	n := 1
	for n < len(rs) {
		n *= 2
	}
	last := args[len(args)-5:]
	for range n - len(rs) {
		args = append(args, last...)
	}
	return n, args
}
