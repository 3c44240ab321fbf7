package lockproto

// PGRenewStatement is PostgreSQL's renewal statement of the lease table q
// for the leases of keys (namespace "", epoch 1, holder "h") and its
// arguments, a TTL of 30s.
func PGRenewStatement(q string, keys []string) (string, []any) {
	rows := make([]leaseRow, len(keys))
	for i, k := range keys {
		rows[i] = leaseRow{key: k, epoch: 1, holder: "h"}
	}
	n, args := pgLease{}.renewArgs(30_000_000, rows)
	return pgLease{}.renewSQL(q, n), args
}
