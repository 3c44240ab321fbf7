package lockproto_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
)

// TestLeaseRenewalPlan: on PostgreSQL, the renewal of 1,024 leases in a
// lease table of 10,000 rows finds its rows by the primary key (index
// scans, no sequential scan of the table), as EXPLAIN shows.
func TestLeaseRenewalPlan(t *testing.T) {
	k := testdb.Postgres
	admin := testdb.AdminDB(t, k)
	tab, err := lockproto.NewLeaseTable(lockproto.Postgres, testdb.Table(t, k, "lplan"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(tab.CreateSQL()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec("DROP TABLE IF EXISTS " + tab.Name()) })
	if _, err := admin.Exec("INSERT INTO " + tab.Name() + ` (namespace, lock_key, reader, epoch, holder, acquired_at, expires_at)
SELECT '', 'name:k' || i, '', 1, 'h', now(), now() + interval '1 hour' FROM generate_series(1, 10000) AS i`); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec("ANALYZE " + tab.Name()); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("name:k%d", 1+i*9)
	}
	q, args := lockproto.PGRenewStatement(tab.Name(), keys)
	rows, err := admin.Query("EXPLAIN "+q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, l)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(plan, "\n")
	if strings.Contains(text, "Seq Scan") || !strings.Contains(text, "Index Scan") {
		t.Errorf("the renewal does not find its rows by the primary key:\n%s", text)
	}
	t.Logf("plan:\n%s", text)
}
